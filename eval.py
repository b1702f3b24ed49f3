"""Evaluates a training run's checkpoints on its config's eval split, from another process.

    python eval.py --workdir=runs/r50                 # the newest checkpoint
    python eval.py --workdir=runs/r50 --step=900 --no-ema
    python eval.py --workdir=runs/r50 --watch         # each new checkpoint, until the last step

Each evaluation prints one line and appends a record to `<workdir>/eval.jsonl`: loss, top-1,
top-5, images, seconds. Every device JAX sees is used, as in training. Errors are one line.
"""

import sys

from absl import app, flags

from training import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "A training run's folder.")
_STEP = flags.DEFINE_integer("step", None, "This checkpoint (default: the newest).")
_EMA = flags.DEFINE_bool("ema", True, "The EMA of the weights, when the run kept one.")
_WATCH = flags.DEFINE_bool("watch", False, "Evaluate each new checkpoint until the run's last.")
_POLL = flags.DEFINE_float("poll_seconds", 30.0, "With --watch: how often to look.")
flags.mark_flag_as_required("workdir")


def main(argv):
    cli.start(argv)
    from inference import evaluate
    from training.errors import UserError

    try:
        evaluator = evaluate.build(_WORKDIR.value)
        if _WATCH.value:
            records = evaluate.watch(evaluator, _EMA.value, _POLL.value)
        else:
            steps = evaluator.checkpoint_steps()
            if _STEP.value is None and not steps:
                raise UserError(f"--workdir {_WORKDIR.value}: no checkpoint there yet")
            step = steps[-1] if _STEP.value is None else _STEP.value
            records = [evaluator.evaluate(step, _EMA.value)]
        for record in records:
            evaluator.append(record)
            print(
                f"step {record['step']}: eval loss {record['eval/loss']:.4f}, "
                f"top-1 {100 * record['eval/top1']:.2f}%, top-5 {100 * record['eval/top5']:.2f}% "
                f"on {record['eval/images']} images in {record['eval/seconds']:.1f} s"
            )
    except UserError as e:
        print(f"eval.py: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    app.run(main)
