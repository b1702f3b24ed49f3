"""Does an image stem run faster on a GPU with its 3 input channels padded with zeros to 4 or 8?

    python bench/stem_channels.py                      # a GPU: the stems alone, then two steps
    python bench/stem_channels.py --batch 2 --steps 1 --windows 1   # a dry run on a CPU

XLA pads a cuDNN convolution's channels for the tensor cores (3 input channels to 4 where the
output has 32 or 64, cuDNN's special case for image stems; others to multiples of 8) only in
float16 (`cudnn_pad_for_convolutions.cc`: "Nothing to do on non-f16 convolutions"), so a bfloat16
stem reaches cuDNN with 3 channels. ViT-S/16's embedding took 0.82 ms of its 28.5 ms step on an
H200, about 20x its arithmetic at the card's rate; ResNet-50's 7x7 stem does twice the
arithmetic. Padding the image (a copy of 0.1 GB at batch 256) and the kernel with zero channels
computes the same convolution.

First each stem alone, bfloat16, forward and the kernel's gradient (an image needs no gradient),
ms a call at 3, 4 and 8 input channels; then whole train steps (`bench/train_step.py`'s, timed as
`bench/gpu_table.py` times ours: `--steps` queued, the median of `--windows`) fed images of 3, 4
and 8 channels, which the networks take as they come (the stem's kernel follows the input).
"""

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).parent))  # bench/attention_speed.py, bench/gpu_table.py

import gpu_table  # noqa: E402
from attention_speed import time_calls  # noqa: E402

from nets.layers import Conv  # noqa: E402

CHANNELS = (3, 4, 8)
# name: (image size, output channels, kernel, strides, padding)
STEMS = {
    "resnet50's 7x7/2 -> 64": (224, 64, 7, 2, ((3, 3), (3, 3))),
    "vit_small's 16x16/16 -> 384": (224, 384, 16, 16, "VALID"),
    "convnext's 4x4/4 -> 96": (224, 96, 4, 4, "VALID"),
    "efficientnet's 3x3/2 -> 32": (224, 32, 3, 2, "SAME"),
}
NETWORKS = ("resnet50", "vit_small_patch16_224")


def time_stem(batch: int, size: int, features: int, k: int, stride: int, padding, calls: int):
    """ms a call of the stem's forward and kernel gradient at each of `CHANNELS`."""
    conv = Conv(features, (k, k), stride, padding, use_bias=False, dtype=jnp.bfloat16, impl="xla")
    figures = {}
    for channels in CHANNELS:
        x = jax.random.normal(jax.random.key(0), (batch, size, size, channels), jnp.bfloat16)
        params = conv.init(jax.random.key(1), x)["params"]
        out = jax.eval_shape(conv.apply, {"params": params}, x)
        cotangent = jax.random.normal(jax.random.key(2), out.shape, out.dtype)

        def run(params, x, cotangent):
            y, vjp = jax.vjp(lambda p: conv.apply({"params": p}, x), params)
            return y, vjp(cotangent)

        figures[channels] = 1e3 * time_calls(jax.jit(run), (params, x, cotangent), calls)
    return figures


def time_step(name: str, batch: int, channels: int, steps: int, windows: int) -> tuple:
    """(img/s, compile seconds) of the network's train step on images of `channels` channels,
    timed as `bench/gpu_table.py` times ours."""
    record = gpu_table.time_ours(name, batch, None, 1000, steps, windows, channels=channels)
    return record["img_s"], record["compile_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--calls", type=int, default=20, help="calls a stem alone is timed over")
    parser.add_argument("--steps", type=int, default=20, help="train steps queued in a window")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--networks", default=",".join(NETWORKS), help="'' for the stems alone")
    args = parser.parse_args()
    print(f"batch {args.batch}, bfloat16, on {jax.devices()[0].device_kind}")
    for label, (size, features, k, stride, padding) in STEMS.items():
        figures = time_stem(args.batch, size, features, k, stride, padding, args.calls)
        cells = ", ".join(f"{c} channels {ms:.3f} ms" for c, ms in figures.items())
        print(f"{label}: {cells}")
    for name in filter(None, args.networks.split(",")):
        for channels in CHANNELS:
            img_s, compile_s = time_step(name, args.batch, channels, args.steps, args.windows)
            print(f"{name}, {channels} channels: {img_s:,.0f} img/s (compile {compile_s:.1f} s)")


if __name__ == "__main__":
    main()
