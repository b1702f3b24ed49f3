"""Times single convolutions, forward + both gradients: nets.layers.Conv against XLA's own.

    python bench/conv_layers.py                  # every shape below
    python bench/conv_layers.py --only depthwise # the shapes whose name contains 'depthwise'

The shapes are those of the zoo's networks at the sizes `train_step.py` is measured at. The two
implementations are timed alternately in one process, so load on a shared machine hits both
alike; each figure is a median.
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from nets.layers import Conv

# name: (input [n, h, w, c], features, kernel, strides, groups)
SHAPES = {
    "resnet18@64 stage1 3x3": ((32, 16, 16, 64), 64, 3, 1, 1),
    "resnet18@64 stage2 3x3 s2": ((32, 16, 16, 64), 128, 3, 2, 1),
    "resnet18@64 stage4 3x3 on 2x2": ((32, 2, 2, 512), 512, 3, 1, 1),
    "resnet18@64 stage4 3x3 s2": ((32, 4, 4, 256), 512, 3, 2, 1),
    "resnet50@224 stem 7x7 s2": ((8, 224, 224, 3), 64, 7, 2, 1),
    "resnet50@224 stage1 3x3": ((8, 56, 56, 64), 64, 3, 1, 1),
    "resnet50@224 stage1 1x1": ((8, 56, 56, 256), 64, 1, 1, 1),
    "resnet50@224 stage2 3x3 s2": ((8, 56, 56, 128), 128, 3, 2, 1),
    "resnet50@224 stage3 3x3": ((8, 14, 14, 256), 256, 3, 1, 1),
    "resnet50@224 stage4 3x3": ((8, 7, 7, 512), 512, 3, 1, 1),
    "resnext50@224 stage1 grouped 3x3": ((8, 56, 56, 128), 128, 3, 1, 32),
    "resnext50@224 stage2 grouped 3x3 s2": ((8, 56, 56, 256), 256, 3, 2, 32),
    "resnext50@224 stage3 grouped 3x3": ((8, 14, 14, 512), 512, 3, 1, 32),
    "resnext50@224 stage4 grouped 3x3": ((8, 7, 7, 1024), 1024, 3, 1, 32),
    "vit_small@224 patch embedding 16x16 s16": ((8, 224, 224, 3), 384, 16, 16, 1),
    "convnext@224 downsampling 2x2 s2": ((8, 56, 56, 96), 192, 2, 2, 1),
    "mobilenet_v2@224 depthwise 3x3 112": ((8, 112, 112, 32), 32, 3, 1, 32),
    "mobilenet_v2@224 depthwise 3x3 s2": ((8, 112, 112, 96), 96, 3, 2, 96),
    "mobilenet_v2@224 depthwise 3x3 28": ((8, 28, 28, 192), 192, 3, 1, 192),
    "mobilenet_v2@224 depthwise 3x3 7": ((8, 7, 7, 960), 960, 3, 1, 960),
}


def step_fn(module):
    """Forward and the gradients of a train step: d/dx and d/dkernel of <y, dy>."""

    def loss(params, x, dy):
        return jnp.vdot(module.apply({"params": params}, x), dy)

    return jax.jit(jax.grad(loss, argnums=(0, 1)))


def time_shape(shape, features, k, strides, groups, repeats):
    x = jax.random.normal(jax.random.key(0), shape)
    modules = {
        impl: Conv(features, (k, k), strides, feature_group_count=groups, use_bias=False, impl=impl)
        for impl in ("cpu_fast", "xla")
    }
    params = modules["xla"].init(jax.random.key(1), x)["params"]
    dy = jnp.ones(jax.eval_shape(modules["xla"].apply, {"params": params}, x).shape)
    fns = {impl: step_fn(m).lower(params, x, dy).compile() for impl, m in modules.items()}
    times = {impl: [] for impl in fns}
    for _ in range(repeats + 1):  # the first round warms up
        for impl, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(params, x, dy))
            times[impl].append(time.perf_counter() - start)
    return {impl: statistics.median(t[1:]) for impl, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="shapes whose name contains this")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'forward + gradients, ms':<40} {'Conv':>9} {'XLA':>9}  speed-up")
    for name, spec in SHAPES.items():
        if args.only in name:
            t = time_shape(*spec, args.repeats)
            fast, xla = t["cpu_fast"] * 1e3, t["xla"] * 1e3
            print(f"{name:<40} {fast:9.2f} {xla:9.2f}  {xla / fast:6.2f}x", flush=True)


if __name__ == "__main__":
    main()
