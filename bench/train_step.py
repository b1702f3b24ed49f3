"""Times a full jitted train step of any network in the registry.

    python bench/train_step.py resnet50 --batch 8 --size 224 --dtype float32

Prints compile seconds, the median step time and img/s for a step of SGD with momentum,
cross-entropy, BatchNorm updates and donated buffers. `--direct` also times the same step built
on the bare Flax module (no `get_network_fn` in between), to show the factory costs nothing.
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import optax

import nets_factory


def make_step(apply, optimizer):
    """`step(params, batch_stats, opt_state, images, labels)` with its state buffers donated."""

    def loss_fn(params, batch_stats, images, labels):
        (logits, _), updates = apply(
            {"params": params, "batch_stats": batch_stats}, images, mutable=["batch_stats"]
        )
        loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
        return loss.mean(), updates["batch_stats"]

    def step(params, batch_stats, opt_state, images, labels):
        grads, batch_stats = jax.grad(loss_fn, has_aux=True)(params, batch_stats, images, labels)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), batch_stats, opt_state

    return jax.jit(step, donate_argnums=(0, 1, 2))


def time_step(step, variables, optimizer, images, labels, steps: int) -> tuple[float, float]:
    """Returns (compile seconds, median seconds per step)."""
    params, batch_stats = variables["params"], variables.get("batch_stats", {})
    opt_state = optimizer.init(params)
    start = time.perf_counter()
    compiled = step.lower(params, batch_stats, opt_state, images, labels).compile()
    compile_s = time.perf_counter() - start
    state = compiled(params, batch_stats, opt_state, images, labels)  # warm-up
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        state = jax.block_until_ready(compiled(*state, images, labels))
        times.append(time.perf_counter() - start)
    return compile_s, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, help="image size; default: the network's")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--direct", action="store_true", help="also time the bare Flax module")
    args = parser.parse_args()

    fn = nets_factory.get_network_fn(
        args.name, args.num_classes, is_training=True, dtype=jnp.dtype(args.dtype)
    )
    size = args.size or fn.default_image_size
    images = jax.random.normal(jax.random.key(0), (args.batch, size, size, 3))
    labels = jax.random.randint(jax.random.key(1), (args.batch,), 0, args.num_classes)
    variables = jax.jit(fn.init)(jax.random.key(2), images)
    optimizer = optax.sgd(0.1, momentum=0.9)
    device = jax.devices()[0].device_kind
    print(f"{args.name} batch {args.batch} @ {size}px {args.dtype} on {device}")

    candidates = {"get_network_fn": fn.apply}
    if args.direct:
        candidates["bare module"] = lambda v, x, **kw: fn.module.apply(v, x, train=True, **kw)
    for label, apply in candidates.items():
        copy = jax.tree.map(jnp.copy, variables)
        compile_s, step_s = time_step(
            make_step(apply, optimizer), copy, optimizer, images, labels, args.steps
        )
        print(
            f"  {label:<16} compile {compile_s:6.1f} s   step {step_s * 1e3:8.1f} ms   "
            f"{args.batch / step_s:8.1f} img/s"
        )


if __name__ == "__main__":
    main()
