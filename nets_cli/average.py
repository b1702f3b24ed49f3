"""Averages a training run's weights over several of its points, as timm's
`avg_checkpoints.py`, and evaluates the average (`nets-average` when installed, `python
average.py` in a checkout).

    nets-average --workdir=runs/r50            # its kept best evaluations (train.keep_best=N)
    nets-average --workdir=runs/r50 --last=5   # its 5 newest checkpoints
    nets-eval --workdir=runs/r50 --averaged    # the average again; nets-export takes it too

The average goes to `<workdir>/averaged/<step>` (the newest step averaged), replacing the one
before; `finetune.init_from` and `distill.teacher` take that folder. Its evaluation (the run's
eval split, as nets-eval) prints one line and is appended to `<workdir>/eval.jsonl`. Errors are
one line on stderr.
"""

import sys
from pathlib import Path

from absl import flags

from nets_cli import common

_WORKDIR = flags.DEFINE_string("workdir", None, "A training run's folder.")
_LAST = flags.DEFINE_integer(
    "last", None, "Average the run's N newest checkpoints instead of its kept best evaluations."
)
_EVALUATE = flags.DEFINE_bool("evaluate", True, "Evaluate the average on the run's eval split.")
_EMA = flags.DEFINE_bool("ema", True, "Evaluate the average of the EMA, when the run kept one.")
_SET = flags.DEFINE_multi_string(
    "set", [], "key.path=value overrides of the run's config.yaml for the evaluation."
)


def main(argv: list[str]) -> None:
    common.start(argv)
    from nets_inference import evaluate, load
    from nets_training import averaging
    from nets_training.errors import UserError
    from nets_training.workdir import AVERAGED_DIR

    try:
        common.require(_WORKDIR, "the training run whose weights to average")
        workdir = Path(_WORKDIR.value).expanduser()
        data_name = load.run_config(workdir, _SET.value).data.name
        common.check_overrides(_SET.value, data_name, evaluate.RUN_KEYS, "evaluating a run")
        points, weights = averaging.averaged(workdir, _LAST.value)
        folder = averaging.write(workdir, weights, points)
        steps = ", ".join(str(p.step) for p in points)
        if _LAST.value is None:
            top1 = ", ".join(f"{100 * p.top1:.2f}%" for p in points)
            what = f"the run's {len(points)} best evaluations (top-1 {top1})"
        else:
            what = f"the run's {len(points)} newest checkpoints"
        print(f"averaged steps {steps}, {what}: {folder}", flush=True)
        if not _EVALUATE.value:
            return
        evaluator = evaluate.build(workdir, _SET.value)
        record = evaluator.evaluate(None, _EMA.value, kept=AVERAGED_DIR)
        record["averaged"] = [p.step for p in points]
    except (UserError, ValueError) as e:  # OutOfMemory and PeerLost: exit status 1
        print(f"{common.program()}: {e}", file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 2))
    sys.exit(common.report(record, f"step {record['step']} (averaged)", evaluator.append))


def run() -> None:
    """The `nets-average` console script."""
    common.run(main, __name__)


if __name__ == "__main__":
    run()
