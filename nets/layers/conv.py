"""The convolution every network family injects.

`Conv` keeps the parameter tree of `flax.linen.Conv` (`kernel` in HWIO layout, `bias`), its
initialisers and its auto-name (`Conv_0`, ...), so a checkpoint does not care which
implementation ran. On CPU it runs `nets.layers.cpu.conv.conv2d`, a convolution with its own
gradient that avoids XLA:CPU's slow paths (7x faster ResNet-18 training at 64 px:
docs/performance.md).

A convolution over non-overlapping patches (strides equal to the kernel, unpadded: ViT's patch
embedding, Swin's and ConvNeXt's stems and downsampling) is one matrix product over the patches
(`patch_conv`). On 2 CPU cores, forward and both gradients of ViT-S/16's embedding of 16 images
at 224 px took 823 ms in `conv2d` (its few-channel filter gradient is made for 3x3 kernels),
232 ms in XLA's, 25 ms so; ConvNeXt's 2x2 downsampling of 96 channels 1.4x faster than `conv2d`.
It is the CPU path's only: on an H200 it made ViT-S/16's train step 0.90x cuDNN's convolution.

`WeightStandardization` is a `Conv.kernel_transform` (timm's `StdConv2d`, BiT's convolutions);
`standardize` is its arithmetic, which NFNet's scaled version shares.
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen.dtypes import promote_dtype
from jax import lax

from nets.layers import padding as pad
from nets.layers.cpu import conv as cpu_conv

Impl = Literal["auto", "xla", "cpu_fast"]
ModuleDef = Any  # a flax Module class, or a partial of one: what families inject


class Conv(nn.Module):
    """A 2-D convolution, `flax.linen.Conv`'s fields and parameters, with a choice of kernels.

    Inputs are `[batch, height, width, in_features]`; the kernel is
    `[kh, kw, in_features // feature_group_count, features]`.

    `impl` picks the implementation: `'xla'` is `lax.conv_general_dilated`, exactly what
    `flax.linen.Conv` runs; `'cpu_fast'` is `nets.layers.cpu.conv.conv2d`, or `patch_conv` over
    non-overlapping patches; `'auto'` takes `'cpu_fast'` when JAX's default backend is CPU and
    `'xla'` otherwise: on GPU/TPU XLA's own convolutions go to cuDNN or the TPU's convolution
    units (on an H200 the patches as one product made ViT-S/16's train step 0.90x cuDNN's
    convolution, `bench/train_step.py --conv both`). Dilated convolutions always take `'xla'`.
    To force a path for a whole network, inject it: `get_network_fn('resnet18', 10,
    conv=partial(Conv, impl='xla'))`.
    """

    features: int
    kernel_size: Sequence[int]
    strides: int | Sequence[int] = 1
    padding: pad.PaddingLike = "SAME"
    input_dilation: int | Sequence[int] = 1
    kernel_dilation: int | Sequence[int] = 1
    feature_group_count: int = 1
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    precision: lax.PrecisionLike = None
    kernel_init: nn.initializers.Initializer = nn.initializers.lecun_normal()
    bias_init: nn.initializers.Initializer = nn.initializers.zeros_init()
    impl: Impl = "auto"
    # A reparametrisation of the stored kernel at every call, `(module, kernel) -> kernel`,
    # which may add parameters of its own to the module (NFNet's scaled weight standardisation,
    # `nets.nfnet.ScaledStandardization`; BiT's `WeightStandardization`); None convolves with
    # the kernel as stored.
    kernel_transform: Callable[[nn.Module, jax.Array], jax.Array] | None = None

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        """`[batch, height, width, in_features]` -> `[batch, out_h, out_w, features]`."""
        if isinstance(self.kernel_size, int):  # flax.linen.Conv would read it as 1-D
            raise ValueError(f"Conv is 2-D: kernel_size needs two entries, got {self.kernel_size}")
        kernel_size = pad.pair(self.kernel_size, "kernel_size")
        if inputs.ndim != 4:
            raise ValueError(f"Conv expects [batch, height, width, channels], got {inputs.shape}")
        in_features = inputs.shape[-1]
        if in_features % self.feature_group_count:
            raise ValueError(
                f"{in_features} input features do not split into {self.feature_group_count} groups"
            )
        kernel_shape = (*kernel_size, in_features // self.feature_group_count, self.features)
        kernel = self.param("kernel", self.kernel_init, kernel_shape, self.param_dtype)
        if self.kernel_transform is not None:
            kernel = self.kernel_transform(self, kernel)
        bias = None
        if self.use_bias:
            bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
        inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=self.dtype)

        strides = pad.pair(self.strides, "strides")
        input_dilation = pad.pair(self.input_dilation, "input_dilation")
        kernel_dilation = pad.pair(self.kernel_dilation, "kernel_dilation")
        extent = tuple(d * (k - 1) + 1 for k, d in zip(kernel_size, kernel_dilation, strict=True))
        padding = pad.pads(self.padding, inputs.shape[1:3], extent, strides)
        # Dilated or cropping (negative padding) convolutions are rare: XLA's own runs them.
        plain = input_dilation == kernel_dilation == (1, 1) and min(sum(padding, ())) >= 0
        if self._resolved_impl() == "cpu_fast" and plain:
            patches = kernel_size == strides != (1, 1) and padding == ((0, 0), (0, 0))
            if patches and self.feature_group_count == 1:
                y = patch_conv(inputs, kernel, self.precision)
            else:
                y = cpu_conv.conv2d(
                    inputs, kernel, strides, padding, self.feature_group_count, self.precision
                )
        else:
            y = lax.conv_general_dilated(
                inputs,
                kernel,
                strides,
                _lax_padding(self.padding, padding),
                lhs_dilation=input_dilation,
                rhs_dilation=kernel_dilation,
                dimension_numbers=("NHWC", "HWIO", "NHWC"),
                feature_group_count=self.feature_group_count,
                precision=self.precision,
            )
        if bias is not None:
            y += bias
        return y

    def _resolved_impl(self) -> str:
        """`impl`, checked, 'auto' resolved: 'cpu_fast' on the CPU, 'xla' elsewhere."""
        if self.impl not in ("auto", "xla", "cpu_fast"):
            raise ValueError(f"Conv.impl must be 'auto', 'xla' or 'cpu_fast', got {self.impl!r}")
        if self.impl == "auto":
            return "cpu_fast" if jax.default_backend() == "cpu" else "xla"
        return self.impl


def patch_conv(x: jax.Array, kernel: jax.Array, precision: lax.PrecisionLike = None) -> jax.Array:
    """A convolution whose strides are its kernel's size, unpadded (a ViT's patch embedding), as
    one matrix product: each output pixel's patch, `[kh * kw * in]` in the kernel's HWI order,
    times the kernel as `[kh * kw * in, out]`. Rows and columns past the last whole patch are
    left out, as 'VALID' does; a map smaller than one patch is refused (no empty output)."""
    n, h, w, c = x.shape
    kh, kw, _, out = kernel.shape
    ho, wo = h // kh, w // kw
    if not ho or not wo:
        raise ValueError(f"Conv: a {h}x{w} map holds no whole {kh}x{kw} patch")
    x = x[:, : ho * kh, : wo * kw].reshape(n, ho, kh, wo, kw, c).transpose(0, 1, 3, 2, 4, 5)
    return lax.dot_general(
        x.reshape(n, ho, wo, kh * kw * c),
        kernel.reshape(kh * kw * c, out),
        (((3,), (0,)), ((), ())),
        precision=precision,
    )


def _lax_padding(padding: pad.PaddingLike, pads: pad.Pads) -> str | pad.Pads:
    """What XLA's own convolution is given: its own 'SAME'/'VALID' (which also see input
    dilation), or the explicit pads."""
    if isinstance(padding, str) and padding.upper() in ("SAME", "VALID"):
        return padding.upper()
    return pads


def standardize(kernel: jax.Array, epsilon: float, scale: jax.Array | float = 1.0) -> jax.Array:
    """`kernel` `[kh, kw, in, out]` standardised per output channel, `(w - mean) / sqrt(var +
    epsilon) * scale`, mean and biased variance over its `kh * kw * in` taps (PyTorch's
    `batch_norm` of the reshaped weight, as timm computes it)."""
    mean = jnp.mean(kernel, axis=(0, 1, 2))
    var = jnp.var(kernel, axis=(0, 1, 2))
    return (kernel - mean) * (lax.rsqrt(var + epsilon) * scale)


@dataclasses.dataclass(frozen=True)
class WeightStandardization:
    """Weight standardisation (Qiao et al. 2019, arXiv:1903.10520) as a `Conv.kernel_transform`:
    the stored kernel standardised at every call (`standardize`), no parameters of its own.
    BiT's convolutions (timm's `StdConv2d(eps=1e-8)`) set `epsilon=1e-8`; timm's default is
    1e-6."""

    epsilon: float = 1e-6

    def __call__(self, module: nn.Module, kernel: jax.Array) -> jax.Array:
        del module
        return standardize(kernel, self.epsilon)
