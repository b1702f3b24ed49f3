"""Our networks' attention, forward and backward, on XLA's implementation and on `'auto'` (cuDNN's
fused kernel on a GPU, odd lengths padded: `nets.layers.attention.fused_attention`).

    python bench/attention_speed.py               # a GPU: ViT-S/16's and Swin-T's first stage
    python bench/attention_speed.py --images 2    # a dry run on a CPU ('auto' is XLA's there)

For each case, bfloat16 queries, keys and values of the network's shapes at `--images` images
(Swin: its 64 windows an image, the relative position bias, and the shifted blocks' mask added
to it), the output and its gradients with respect to the inputs (and the bias), jitted:
milliseconds a call (median of `--calls`, each waited for), what `'auto'` ran (the line
`DotProductAttention` logs), and how far its output and gradients are from XLA's (a bias whose
gradient cuDNN did not compute would show here as a difference of 1).
"""

import argparse
import logging
import statistics
import time

import jax
import jax.numpy as jnp

from nets.layers import attention
from nets.layers.attention import DotProductAttention

# (label, images -> (batch, tokens, heads, head_dim), bias: None, 'shared' or 'per window')
CASES = (
    ("vit_small_patch16_224 (197 tokens)", lambda n: (n, 197, 6, 64), None),
    ("deit_small_distilled (198 tokens)", lambda n: (n, 198, 6, 64), None),
    ("swin_tiny stage 1, windows", lambda n: (64 * n, 49, 3, 32), "shared"),
    ("swin_tiny stage 1, shifted windows", lambda n: (64 * n, 49, 3, 32), "per window"),
)


class Said(logging.Handler):
    """Keeps the lines `DotProductAttention` logs (which implementation ran)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "DotProductAttention" in record.getMessage():
            self.lines.append(record.getMessage())


def forward_backward(implementation: str, with_bias: bool):
    """The jitted `(output, gradients)` of the attention, the gradients of `<output, cotangent>`
    with respect to q, k, v (and the bias): what a train step runs."""
    attention = DotProductAttention(implementation)

    def run(q, k, v, bias, cotangent):
        inputs = (q, k, v, bias) if with_bias else (q, k, v)
        out, vjp = jax.vjp(lambda *a: attention.apply({}, *a), *inputs)
        return out, vjp(cotangent)

    return jax.jit(run)


def relative_difference(got: jax.Array, want: jax.Array) -> float:
    """The largest difference, relative to the largest magnitude of `want`."""
    got, want = got.astype(jnp.float32), want.astype(jnp.float32)
    return float(jnp.max(jnp.abs(got - want)) / jnp.max(jnp.abs(want)))


def time_calls(fn, args, calls: int) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=256, help="the batch, in images")
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    said = Said()
    logging.getLogger().addHandler(said)
    logging.getLogger("absl").setLevel(logging.INFO)
    print(
        f"on {jax.devices()[0].device_kind}, jax {jax.__version__}, bfloat16, {args.images} images"
    )
    for label, shape_of, bias_kind in CASES:
        shape = shape_of(args.images)
        keys = jax.random.split(jax.random.key(0), 5)
        q, k, v, cotangent = (jax.random.normal(key, shape, jnp.bfloat16) for key in keys[:4])
        bias = None
        if bias_kind is not None:
            rows = 1 if bias_kind == "shared" else shape[0]
            bias = jax.random.normal(keys[4], (rows, shape[2], shape[1], shape[1]))
        inputs = (q, k, v, bias, cotangent)
        ms, results = {}, {}
        for implementation in ("xla", "auto"):
            said.lines.clear()
            attention._said.clear()  # each case says what it ran, even at a shape said before
            try:
                fn = forward_backward(implementation, bias is not None)
                results[implementation] = fn(*inputs)
                ms[implementation] = 1e3 * time_calls(fn, inputs, args.calls)
            except Exception as e:  # a kernel that compiles or runs nowhere here: say so, go on
                ms[implementation] = float("nan")
                said.lines.append(f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
        ran = said.lines[-1] if said.lines else "XLA's (not a GPU, or not half precision)"
        differences = "-"
        if len(results) == 2:
            (out, grads), (xla_out, xla_grads) = results["auto"], results["xla"]
            names = ("output", "dq", "dk", "dv", "dbias")[: 1 + len(grads)]
            named = zip(names, (out, *grads), (xla_out, *xla_grads), strict=True)
            differences = ", ".join(f"{n} {relative_difference(a, b):.2g}" for n, a, b in named)
        print(
            f"  {label:<36} {str(shape):<20} xla {ms['xla']:8.2f} ms   auto {ms['auto']:8.2f} ms"
            f"   ({ms['xla'] / ms['auto']:.2f}x)\n"
            f"      auto ran: {ran}\n"
            f"      auto against xla, largest difference relative to xla's largest: {differences}"
        )


if __name__ == "__main__":
    main()
