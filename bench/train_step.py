"""Times a full jitted train step of any network in the registry.

    python bench/train_step.py resnet50 --batch 8 --size 224 --dtype float32 --conv both

Prints compile seconds, the median step time and img/s for a step of SGD with momentum,
cross-entropy, BatchNorm updates and donated buffers. `--direct` also times the same step built
on the bare Flax module (no `get_network_fn` in between), to show the factory costs nothing.
`--conv both` times the network built on the zoo's `nets.layers.Conv` and on plain
`flax.linen.Conv` (where a network pads as PyTorch does, which flax's Conv cannot: XLA's own
convolution through the zoo's Conv) in the same process, step by step interleaved; `--augment`
also times the step with DeiT's device augmentation (random erasing, mixup/cutmix), interleaved
with the plain one (`--conv ours`, the default, needed); `--torch` adds
PyTorch's eager CPU step (default and `channels_last` memory formats) for the networks
`bench/torch_resnet.py` knows, when torch is installed; `--teacher NAME` also times the step
distilled from that network (train.py's `distill`: its forward on each batch, DeiT's hard loss).
Each figure is a median over `--steps`.
`bench/cpu_table.py` prints docs/performance.md's CPU table (four networks) with one command;
`bench/gpu_table.py` its GPU table, this step against PyTorch's eager and `torch.compile`d steps.
"""

import argparse
import importlib.util
import statistics
import sys
import time
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

import nets_factory
from nets.layers import Conv
from nets_training import device_augment, distill, host_memory, initial_state, xla_cpu_flags
from nets_training.config import DataConfig, MixupConfig


def make_step(apply, optimizer, augment=None, distiller=None):
    """`step(params, batch_stats, opt_state, images, labels[, teacher])` with its state buffers
    donated. `augment` (`nets_training.device_augment.make_augment`'s): erasing and mixing the
    batch first, as train.py's step does, with a fixed key (the same work every step).
    `distiller` (`nets_training.distill.Distiller`): its teacher's forward on the batch and the
    loss train.py's step adds, the teacher's variables the step's last argument."""

    def loss_fn(params, batch_stats, images, labels, teacher):
        targets = None
        if augment is not None:
            images, targets = augment(images, labels, jax.random.key(1))
        (logits, end_points), updates = apply(
            {"params": params, "batch_stats": batch_stats},
            images,
            mutable=["batch_stats"],
            rngs={"dropout": jax.random.key(0)},  # one mask every step: dropout costs the same
        )
        if targets is None:
            targets = jax.nn.one_hot(labels, logits.shape[-1])

        def labels_loss(logits):
            return optax.softmax_cross_entropy(logits.astype(jnp.float32), targets).mean()

        if distiller is None:
            return labels_loss(logits), updates["batch_stats"]
        teacher_logits = distiller.teacher_logits(teacher, images)
        loss, _ = distiller.objective(logits, end_points, labels_loss, teacher_logits)
        return loss, updates["batch_stats"]

    def step(params, batch_stats, opt_state, images, labels, teacher=None):
        grads, batch_stats = jax.grad(loss_fn, has_aux=True)(
            params, batch_stats, images, labels, teacher
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), batch_stats, opt_state

    return jax.jit(step, donate_argnums=(0, 1, 2))


class Timer:
    """One compiled train step and its state; `run()` times one step."""

    def __init__(self, step, variables, optimizer, images, labels, teacher=None):
        params, batch_stats = variables["params"], variables.get("batch_stats", {})
        opt_state = optimizer.init(params)
        self.batch = (images, labels) if teacher is None else (images, labels, teacher)
        start = time.perf_counter()
        self.compiled = step.lower(params, batch_stats, opt_state, *self.batch).compile()
        self.compile_s = time.perf_counter() - start
        self.state = self.compiled(params, batch_stats, opt_state, *self.batch)  # warm-up
        self.times: list[float] = []

    def run(self) -> None:
        start = time.perf_counter()
        self.state = jax.block_until_ready(self.compiled(*self.state, *self.batch))
        self.times.append(time.perf_counter() - start)

    def queued(self, steps: int) -> float:
        """Seconds a step over `steps` steps queued on the device, then one wait: no host round
        trip between steps, as in train.py's loop (`run` waits for each)."""
        start = time.perf_counter()
        for _ in range(steps):
            self.state = self.compiled(*self.state, *self.batch)
        jax.block_until_ready(self.state)
        return (time.perf_counter() - start) / steps


BASELINES = ("flax.linen.Conv", "XLA's conv")


def plain_conv(name: str, num_classes: int, dtype, images) -> tuple[str, Any]:
    """The baseline convolution, by label: plain `flax.linen.Conv` (every family takes its
    convolution from a `conv` field), or where the network pads as flax's Conv cannot (PyTorch's
    'SYMMETRIC': timm's EfficientNets, MobileNets), the zoo's Conv on XLA's own convolution, the
    same `lax.conv_general_dilated` flax runs."""
    flax_fn = nets_factory.get_network_fn(name, num_classes, is_training=True, conv=nn.Conv)
    try:
        jax.eval_shape(flax_fn.init, jax.random.key(0), images.astype(dtype))
    except (ValueError, TypeError, RuntimeError):  # flax's Conv refuses the padding
        return BASELINES[1], partial(Conv, impl="xla")
    return BASELINES[0], nn.Conv


def build_timers(
    name: str,
    batch: int,
    size: int | None,
    dtype: str,
    num_classes: int,
    conv: str,
    direct=False,
    augment=False,
    channels: int = 3,
    teacher: str | None = None,
    **network_kwargs: Any,
) -> tuple[dict[str, Timer], int]:
    """The compiled steps to compare, by label, and the image size they run at.

    `conv`: 'ours' (the zoo's `nets.layers.Conv`), 'flax' (plain `flax.linen.Conv`) or 'both'.
    `augment`: also the zoo's step with DeiT's device augmentation (`DEIT_DEVICE_AUGMENT`).
    `teacher`: also the zoo's step distilled (hard, as DeiT's) from this network of the registry,
    random weights in evaluation mode at the step's dtype and image size.
    `channels`: the images' (`bench/stem_channels.py` pads them; the stem's kernel follows).
    `network_kwargs`: the network's own fields (`attention='xla'`), as `get_network_fn` takes them.
    """
    dtype = jnp.dtype(dtype)
    fn = nets_factory.get_network_fn(
        name, num_classes, is_training=True, dtype=dtype, **network_kwargs
    )
    size = size or fn.default_image_size
    images = jax.random.normal(jax.random.key(0), (batch, size, size, channels))
    labels = jax.random.randint(jax.random.key(1), (batch,), 0, num_classes)
    with initial_state.random_bits_to_compile_fast():  # as train.py's: on an H200, ResNet-50's
        # initialisation at the whole batch, threefry's rounds unrolled, compiled for over 30 s
        variables = initial_state.run_once(jax.jit(fn.init), jax.random.key(2), images[:1])
    optimizer = optax.sgd(0.1, momentum=0.9)
    print(f"{name} batch {batch} @ {size}px {dtype} on {jax.devices()[0].device_kind}")

    candidates = {}
    if conv in ("ours", "both"):
        candidates["nets.layers.Conv"] = fn.apply
    if conv in ("flax", "both"):
        label, plain = plain_conv(name, num_classes, dtype, images)
        flax_fn = nets_factory.get_network_fn(
            name, num_classes, is_training=True, dtype=dtype, conv=plain, **network_kwargs
        )
        candidates[label] = flax_fn.apply
    if direct:
        candidates["bare module"] = lambda v, x, **kw: fn.module.apply(v, x, train=True, **kw)
    steps = {label: make_step(apply, optimizer) for label, apply in candidates.items()}
    if augment:
        data, mixup = DEIT_DEVICE_AUGMENT
        deit = device_augment.make_augment(data, mixup, num_classes, label_smoothing=0.1)
        steps["+ DeiT's erasing, mixup"] = make_step(fn.apply, optimizer, deit)
    timers = {}
    for label, step in steps.items():
        copy = jax.tree.map(jnp.copy, variables)
        timers[label] = Timer(step, copy, optimizer, images, labels)
    if teacher:
        teacher_fn = nets_factory.get_network_fn(teacher, num_classes, dtype=dtype)
        with initial_state.random_bits_to_compile_fast():
            taught = initial_state.run_once(jax.jit(teacher_fn.init), jax.random.key(3), images[:1])
        identity = ((1.0,) * channels, (0.0,) * channels)
        distiller = distill.Distiller(teacher_fn, *identity, size, "hard", 1.0, 0.5, teacher)
        copy = jax.tree.map(jnp.copy, variables)
        step = make_step(fn.apply, optimizer, distiller=distiller)
        timers[TAUGHT] = Timer(step, copy, optimizer, images, labels, taught)
    return timers, size


TAUGHT = "+ teacher (hard)"


def time_augment_alone(batch: int, size: int, num_classes: int, steps: int) -> float:
    """Median seconds of `DEIT_DEVICE_AUGMENT` on a batch, jitted on its own."""
    augment = jax.jit(device_augment.make_augment(*DEIT_DEVICE_AUGMENT, num_classes, 0.1))
    images = jax.random.normal(jax.random.key(0), (batch, size, size, 3))
    labels = jnp.arange(batch) % num_classes
    jax.block_until_ready(augment(images, labels, jax.random.key(1)))
    times = []
    for i in range(steps):
        start = time.perf_counter()
        jax.block_until_ready(augment(images, labels, jax.random.key(i)))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# The part of DeiT's recipe that runs in the train step: random erasing 0.25 ('pixel'), mixup 0.8
# and cutmix 1.0 (switch 0.5, one draw per batch), label smoothing 0.1.
DEIT_DEVICE_AUGMENT = (
    DataConfig(reprob=0.25, remode="pixel"),
    MixupConfig(mixup_alpha=0.8, cutmix_alpha=1.0),
)


def run_interleaved(timers: dict, steps: int) -> dict[str, float]:
    """Median seconds a step of each timer, the timers run in turn so load hits all alike."""
    for _ in range(steps):
        for timer in timers.values():
            timer.run()
    return {label: statistics.median(t.times) for label, t in timers.items()}


def add_runtime_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--malloc-defaults",
        action="store_true",
        help="keep glibc's malloc defaults (train.py sets nets_training.host_memory's)",
    )
    parser.add_argument(
        "--ynn-convolutions",
        action="store_true",
        help="keep XLA:CPU's YNNPACK convolutions (train.py sets nets_training.xla_cpu_flags')",
    )


def set_runtime(args: argparse.Namespace) -> None:
    """The CPU settings `train.py` makes, before JAX starts: `nets_training.host_memory`'s malloc
    unless `--malloc-defaults`, `nets_training.xla_cpu_flags`' unless `--ynn-convolutions`."""
    if not args.malloc_defaults:
        host_memory.reuse_freed_memory()
    if not args.ynn_convolutions:
        xla_cpu_flags.prefer_eigen_convolutions()


def add_step_flags(parser: argparse.ArgumentParser, steps: int, steps_help: str) -> None:
    """The network and step to build (`build_timers`' arguments), and how many steps to run."""
    parser.add_argument("name")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, help="image size; default: the network's")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=steps, help=steps_help)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_step_flags(parser, 10, "steps timed, each waited for; the median is reported")
    parser.add_argument("--direct", action="store_true", help="also time the bare Flax module")
    parser.add_argument(
        "--augment", action="store_true", help="also time the step with DeiT's device augmentation"
    )
    parser.add_argument(
        "--conv",
        default="ours",
        choices=["ours", "flax", "both"],
        help="the zoo's Conv (nets.layers.Conv), plain flax.linen.Conv, or both interleaved",
    )
    parser.add_argument(
        "--attention",
        choices=["auto", "xla", "cudnn"],
        help="the attention implementation of a network that has the field; default: its own",
    )
    parser.add_argument(
        "--torch", action="store_true", help="also time PyTorch (see bench/torch_resnet.py)"
    )
    parser.add_argument(
        "--teacher", help="also time the step distilled from this network (train.py's distill)"
    )
    add_runtime_flags(parser)
    args = parser.parse_args()
    set_runtime(args)
    if args.torch and importlib.util.find_spec("torch") is None:  # before minutes of compiling
        sys.exit("train_step.py: --torch needs PyTorch, which is not installed: pip install torch")

    timers, size = build_timers(
        args.name,
        args.batch,
        args.size,
        args.dtype,
        args.num_classes,
        args.conv,
        args.direct,
        args.augment,
        teacher=args.teacher,
        **({"attention": args.attention} if args.attention else {}),
    )
    if args.torch:
        import torch_resnet  # bench/torch_resnet.py; PyTorch is optional, never a dependency

        torch_args = (args.name, args.batch, size, args.num_classes)
        timers["PyTorch eager"] = torch_resnet.Timer(*torch_args)
        timers["PyTorch chan_last"] = torch_resnet.Timer(*torch_args, channels_last=True)
    medians = run_interleaved(timers, args.steps)
    for label, timer in timers.items():
        step_s = medians[label]
        compile_s = f"{timer.compile_s:6.1f} s" if timer.compile_s is not None else "     -  "
        print(
            f"  {label:<18} compile {compile_s}   step {step_s * 1e3:8.1f} ms   "
            f"{args.batch / step_s:8.1f} img/s"
        )
    if args.augment and "nets.layers.Conv" in medians:
        plain, augmented = medians["nets.layers.Conv"], medians["+ DeiT's erasing, mixup"]
        alone = time_augment_alone(args.batch, size, args.num_classes, args.steps)
        print(
            f"  DeiT's device augmentation: {1e3 * (augmented - plain):+.1f} ms a step "
            f"(interleaved), {1e3 * alone:.1f} ms alone"
        )
    if args.teacher and "nets.layers.Conv" in medians:
        plain, taught = medians["nets.layers.Conv"], medians[TAUGHT]
        print(
            f"  the teacher, {args.teacher}: {1e3 * (taught - plain):+.1f} ms a step, "
            f"{taught / plain:.2f}x the step's time"
        )
    baseline = next((b for b in BASELINES if b in medians), None)
    if baseline and len(medians) > 1:
        for label, step_s in medians.items():
            if label != baseline:
                print(f"  {label} vs {baseline}: {medians[baseline] / step_s:.2f}x")


if __name__ == "__main__":
    main()
