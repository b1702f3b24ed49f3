"""What `remat` (each block recomputed in the backward pass) saves and costs, per network.

    python bench/remat_memory.py vit_base_patch16_224 --batch 64 --dtype bfloat16
    python bench/remat_memory.py resnet50 convnext_tiny --batch 128 --remat true dots_saveable

Prints, without `remat` and with each of `--remat`'s values (True, or a policy of
`nets.layers.remat.POLICIES`: what a block keeps besides its input), what the backward pass
keeps from the forward pass as JAX differentiates it (the residuals of `jax.vjp`: the same on
every backend), then what XLA makes of `bench/train_step.py`'s train step (SGD with momentum,
cross-entropy, BatchNorm updates, donated state) compiled on abstract inputs, so nothing the size
of a batch is allocated: its temporary memory (activations kept and scratch) and its
floating-point operations. The compiled figures are the backend's own: XLA:CPU schedules the
recomputation early, so it saves no memory there (measured: ViT-S/16 1.10x the temporaries);
run it on the GPU to know the GPU's.
`--time STEPS` also runs each step on random data and prints its median time.
"""

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import optax
from train_step import add_runtime_flags, make_step, set_runtime

import nets_factory
from nets.layers.remat import checkpoint_policy


def abstract_network(name: str, remat: bool | str, batch: int, size: int | None, dtype: str):
    """The training network `name`, its abstract images and its abstract variables."""
    fn = nets_factory.get_network_fn(name, 1000, is_training=True, dtype=dtype, remat=remat)
    size = size or fn.default_image_size
    images = jax.ShapeDtypeStruct((batch, size, size, 3), jnp.float32)
    return fn, images, jax.eval_shape(fn.init, jax.random.key(0), images)


def compiled(fn, images, variables):
    """The train step of `fn`, compiled for abstract inputs, and those inputs' shapes."""
    labels = jax.ShapeDtypeStruct(images.shape[:1], jnp.int32)
    optimizer = optax.sgd(0.1, momentum=0.9)
    opt_state = jax.eval_shape(optimizer.init, variables["params"])
    args = (variables["params"], variables.get("batch_stats", {}), opt_state, images, labels)
    return make_step(fn.apply, optimizer).lower(*args).compile(), args


def residual_bytes(fn, images, variables) -> int:
    """The bytes of the residuals `jax.vjp` keeps for the training loss of `fn` (abstract)."""

    def residuals(params, batch_stats, images):
        def loss(params):
            (logits, _), _ = fn.apply(
                {"params": params, "batch_stats": batch_stats},
                images,
                mutable=["batch_stats"],
                rngs={"dropout": jax.random.key(0)},
            )
            return logits.astype(jnp.float32).sum()

        return jax.tree.leaves(jax.vjp(loss, params)[1])

    kept = jax.eval_shape(residuals, variables["params"], variables.get("batch_stats", {}), images)
    return sum(a.size * a.dtype.itemsize for a in kept)


def median_seconds(step, args, steps: int) -> float:
    """The median time of `steps` runs of the compiled `step` on random inputs of `args`'s
    shapes, each waited for."""
    state = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), args[:3])
    images = jax.random.normal(jax.random.key(0), args[3].shape)
    labels = jnp.zeros(args[4].shape, jnp.int32)
    state = jax.block_until_ready(step(*state, images, labels))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        state = jax.block_until_ready(step(*state, images, labels))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="+")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, help="image size; default: the network's")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--time", type=int, default=0, metavar="STEPS", help="also time STEPS")
    parser.add_argument(
        "--remat",
        nargs="+",
        default=[True],
        type=lambda value: True if value.lower() == "true" else value,
        help="remat values to compare with none: true, or a policy's name (default: true)",
    )
    add_runtime_flags(parser)
    args = parser.parse_args()
    set_runtime(args)
    for name in args.names:  # before minutes of compiling: a network without `remat`, a typo
        try:
            nets_factory.get_network_fn(name, 1000, remat=True)
            for remat in args.remat:
                checkpoint_policy(remat)
        except (TypeError, ValueError) as e:
            sys.exit(f"remat_memory.py: {e}")
    print(f"batch {args.batch}, {args.dtype}, on {jax.devices()[0].device_kind}")
    for name in args.names:
        figures = {}
        networks = {
            remat: abstract_network(name, remat, args.batch, args.size, args.dtype)
            for remat in (False, *args.remat)
        }
        for remat, network in networks.items():
            kept = residual_bytes(*network)
            print(f"{name} remat={remat!s}: residuals {kept / 2**20:9.1f} MiB (jax.vjp's)")
        for remat, network in networks.items():
            start = time.perf_counter()
            step, shapes = compiled(*network)
            memory, cost = step.memory_analysis(), step.cost_analysis()
            cost = cost[0] if isinstance(cost, list) else cost  # older jax: one per device
            seconds = median_seconds(step, shapes, args.time) if args.time else None
            figures[remat] = (memory.temp_size_in_bytes, cost.get("flops", 0.0), seconds)
            line = (
                f"{name} remat={remat!s}: temporaries {memory.temp_size_in_bytes / 2**20:9.1f}"
                f" MiB, {cost.get('flops', 0.0) / 1e9:8.1f} GFLOP a step"
                f" (compiled in {time.perf_counter() - start:.1f} s)"
            )
            print(line + (f", {seconds * 1e3:.1f} ms a step" if seconds else ""))
        kept, flops, seconds = figures.pop(False)
        for remat, (remat_kept, remat_flops, remat_seconds) in figures.items():
            ratio = f", time x{remat_seconds / seconds:.2f}" if seconds else ""
            print(
                f"{name}: remat={remat} keeps {remat_kept / kept:.2f}x the temporaries for "
                f"{remat_flops / flops:.2f}x the operations{ratio}"
            )


if __name__ == "__main__":
    main()
