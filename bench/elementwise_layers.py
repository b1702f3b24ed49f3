"""The layers without a matrix product that bound a train step, alone, forward and backward:
ResNet-50's max pooling and BatchNorms, ViT's GELU, two or three implementations of each.

    python bench/elementwise_layers.py              # a GPU: the networks' shapes at batch 256
    python bench/elementwise_layers.py --images 2   # a dry run on a CPU

On an H200, half of ResNet-50's train step is layers that move memory more than they compute
(BatchNorm, ReLU, the residual sums, max pooling: `bench/step_profile.py resnet50`), the costliest
single one max pooling's gradient, XLA's `select_and_scatter`; ViT-S/16's costliest operation is
its MLPs' GELU. Each case runs what a train step runs for the layer, bfloat16, jitted: the output
and the gradients of `<output, cotangent>`; it prints milliseconds a call (median of `--calls`,
each waited for), the bandwidth that is for the least traffic the layer needs (every input,
output, cotangent and gradient moved once), and how far the other implementations' results are
from the first's.
"""

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).parent))  # bench/attention_speed.py

from attention_speed import relative_difference, time_calls  # noqa: E402

from nets.layers import BatchNorm, gelu, max_pool  # noqa: E402


def pool(impl: str) -> Callable:
    return lambda x: max_pool(x, 3, 2, "SYMMETRIC", impl=impl)  # ResNet's stem: MaxPool2d(3, 2, 1)


def batch_norm(module: type[nn.BatchNorm], residual: bool) -> Callable:
    """`layer(params, x[, shortcut])`: BatchNorm in training, then the residual sum and ReLU,
    as a bottleneck block ends."""
    norm = module(use_running_average=False, dtype=jnp.bfloat16)

    def layer(params, x, *shortcut):
        y, _ = norm.apply({"params": params}, x, mutable=["batch_stats"])
        return nn.relu(y + shortcut[0] if residual else y)

    return layer


def norm_params(n: int) -> dict:
    return {"scale": jnp.linspace(0.5, 1.5, n), "bias": jnp.linspace(-0.1, 0.1, n)}


# (label, input shapes at n images, the BatchNorms' parameters' width, {implementation: layer})
CASES = (
    (
        "max pool 3x3/2, the stem's [n, 112, 112, 64]",
        lambda n: [(n, 112, 112, 64)],
        None,
        {"xla": pool("xla"), "slices": pool("slices")},
    ),
    (
        "BatchNorm, ReLU: stage 1's [n, 56, 56, 64]",
        lambda n: [(n, 56, 56, 64)],
        64,
        {
            "flax": batch_norm(nn.BatchNorm, False),
            "ours": batch_norm(BatchNorm, False),
        },
    ),
    (
        "BatchNorm, + shortcut, ReLU: stage 1's [n, 56, 56, 256]",
        lambda n: [(n, 56, 56, 256)] * 2,
        256,
        {
            "flax": batch_norm(nn.BatchNorm, True),
            "ours": batch_norm(BatchNorm, True),
        },
    ),
    (
        "GELU, exact: ViT-S/16's MLP [n, 197, 1536]",
        lambda n: [(n, 197, 1536)],
        None,
        {"jax.nn.gelu": partial(jax.nn.gelu, approximate=False), "ours": gelu},
    ),
)


def forward_backward(layer: Callable) -> Callable:
    """The jitted `(output, gradients of <output, cotangent> by input)` of `layer`."""

    def run(inputs, cotangent):
        out, vjp = jax.vjp(layer, *inputs)
        return out, vjp(cotangent)

    return jax.jit(run)


def least_bytes(inputs: tuple, out: jax.Array) -> int:
    """Every input, the output, the cotangent and the inputs' gradients, each moved once."""
    return 2 * sum(x.nbytes for x in jax.tree.leaves(inputs)) + 2 * out.nbytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    print(f"{args.images} images, bfloat16, on {jax.devices()[0].device_kind}")
    keys = iter(jax.random.split(jax.random.key(0), 16))
    for label, shapes, channels, layers in CASES:
        inputs = tuple(jax.random.normal(next(keys), s, jnp.bfloat16) for s in shapes(args.images))
        inputs = inputs if channels is None else (norm_params(channels), *inputs)
        print(label)
        out_shape = jax.eval_shape(next(iter(layers.values())), *inputs)
        cotangent = jax.random.normal(next(keys), out_shape.shape, out_shape.dtype)
        results = {}
        for impl, layer in layers.items():
            fn = forward_backward(layer)
            results[impl] = fn(inputs, cotangent)
            ms = 1e3 * time_calls(fn, (inputs, cotangent), args.calls)
            gb_s = least_bytes(inputs, results[impl][0]) / ms / 1e6
            print(f"  {impl:>14}: {ms:8.3f} ms  ({gb_s:7.1f} GB/s for the least traffic)")
        (first, reference), *others = results.items()
        for impl, result in others:
            worst = max(
                relative_difference(a, b)
                for a, b in zip(jax.tree.leaves(result), jax.tree.leaves(reference), strict=True)
            )
            print(f"  {impl} differs from {first} by {worst:.1e} of the largest value at most")


if __name__ == "__main__":
    main()
