"""Times train.py's loop against its train step alone: what the program around the step costs.

    python bench/loop_speed.py --set model.name=resnet20 --set data.image_size=8 \
        --set model.num_classes=10 --set data.batch_size=64          # CPU: a step of a few ms
    python bench/loop_speed.py --config configs/synthetic_resnet50.yaml \
        --set model.dtype=bfloat16 --set data.batch_size=256         # a GPU

Runs `loop.train` on the config (synthetic data unless `--set data.name=...`) for `--steps`
steps with no evaluation or checkpoint before the end, and reads its img/s from the records
after the first (compilation); then times `bench/train_step.py`'s step for the same network,
batch, image size and dtype on data already on the device, `--step-steps` steps queued then one
wait, median of 3 such windows. Prints both, their ratio, the part
of the loop's time spent waiting for data (train/data_wait). train.py's own lines say when its
first step ended and how long the step took to compile.
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # bench/train_step.py

import train_step  # noqa: E402

from nets_training import config, loop  # noqa: E402

SYNTHETIC = Path(__file__).parents[1] / "configs" / "synthetic_resnet50.yaml"


def loop_rate(cfg: config.Config) -> tuple[float, float]:
    """train.py's img/s (median of its records after the first) and the mean data wait."""
    with tempfile.TemporaryDirectory() as workdir:
        loop.train(cfg, workdir)
        lines = (Path(workdir) / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    timed = [r for r in records if "train/img_per_sec" in r][1:]  # the first window warms up
    if not timed:
        sys.exit("loop_speed.py: too few records; raise --steps or lower --log-every")
    rates = [r["train/img_per_sec"] for r in timed]
    waits = [r["train/data_wait"] for r in timed]
    return statistics.median(rates), statistics.mean(waits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(SYNTHETIC))
    parser.add_argument("--set", action="append", default=[], help="key.path=value override")
    parser.add_argument("--steps", type=int, default=300, help="train.py's steps")
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--step-steps", type=int, default=50, help="steps of the step alone")
    train_step.add_runtime_flags(parser)
    args = parser.parse_args()
    train_step.set_runtime(args)

    run_length = [
        f"train.steps={args.steps}",
        f"train.log_every={args.log_every}",
        "train.eval_every=0",
        f"train.checkpoint_every={10 * args.steps}",
        "optim.warmup_epochs=0",
    ]
    cfg = config.load(args.config, ["data.name=synthetic", *args.set, *run_length])
    resolved, _, _ = loop.resolve(cfg)
    m, d = resolved.model, resolved.data
    program, waiting = loop_rate(cfg)

    timers, size = train_step.build_timers(
        m.name, d.batch_size, d.image_size, m.dtype, m.num_classes, "ours"
    )
    (timer,) = timers.values()
    step = d.batch_size / statistics.median(timer.queued(args.step_steps) for _ in range(3))
    print(
        f"{m.name} batch {d.batch_size} @ {d.image_size}px {m.dtype}, {d.name} data "
        f"({d.workers} workers, {d.threads} threads):\n"
        f"  train.py's loop    {program:10.1f} img/s (waiting for data {100 * waiting:.1f}%)\n"
        f"  train_step.py      {step:10.1f} img/s (data on the device)\n"
        f"  loop / step        {program / step:10.2f}"
    )


if __name__ == "__main__":
    main()
