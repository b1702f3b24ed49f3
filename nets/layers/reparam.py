"""Structural reparameterization (Ding et al. 2021, RepVGG, arXiv:2101.03697, section 3.3): a
sum of linear branches trained apart, each a bias-free convolution and its BatchNorm (and a
BatchNorm of the input itself, the identity branch), is one biased convolution at inference.

`branches` builds the training form (or, `deploy`, the fused `reparam_conv`) inside the calling
module, as timm's `RepVggBlock`, `MobileOneBlock` and `ReparamLargeKernelConv` hold them;
`fuse_branches` folds such a module's variables into that convolution's kernel and bias:
every branch's kernel scaled by its BatchNorm's `gamma / sqrt(var + eps)`, smaller kernels
zero-padded to the largest about their centre, the identity as a kernel with a one at the centre
of each channel's own input (within its group), the biases `beta - mean * gamma / sqrt(var +
eps)` summed. Branches are summed in the order given, the identity last (timm's order).
"""

from collections.abc import Sequence
from functools import partial

import jax
import jax.numpy as jnp

from nets.layers.conv import ModuleDef
from nets.layers.conv_norm_act import ConvNormAct

IDENTITY = "identity"  # the identity branch's BatchNorm
FUSED = "reparam_conv"  # the fused convolution, timm's name


def branches(
    x: jax.Array,
    features: int,
    kernels: Sequence[tuple[str, int]],
    *,
    conv: ModuleDef,
    norm: ModuleDef,
    strides: int = 1,
    groups: int = 1,
    identity: bool = True,
    deploy: bool = False,
    kernel_size: int | None = None,
) -> jax.Array:
    """The sum of a conv-BatchNorm branch `(name, kernel size)` for each of `kernels` and, with
    `identity` where the shapes allow (stride 1, `features` channels in), a BatchNorm of `x`;
    `deploy`: the one biased convolution `reparam_conv` of `kernel_size` (default the largest).
    Called from a compact `__call__`: the layers are the caller's. PyTorch's symmetric padding.
    """
    if deploy:
        size = kernel_size or max(k for _, k in kernels)
        fused = conv(
            features,
            (size, size),
            strides=strides,
            padding="SYMMETRIC",
            feature_group_count=groups,
            use_bias=True,
            name=FUSED,
        )
        return fused(x)
    branch = partial(
        ConvNormAct,
        features,
        conv=conv,
        norm=norm,
        strides=strides,
        padding="SYMMETRIC",
        groups=groups,
    )
    y = None
    for name, size in kernels:
        out = branch(size, name=name)(x)
        y = out if y is None else y + out
    if identity and strides == 1 and x.shape[-1] == features:
        out = norm(name=IDENTITY)(x)
        y = out if y is None else y + out
    return y


def fuse_conv_bn(
    kernel: jax.Array, bn: dict, stats: dict, eps: float
) -> tuple[jax.Array, jax.Array]:
    """A bias-free convolution's kernel `[kh, kw, in, out]` and its BatchNorm -> kernel, bias."""
    scale = bn["scale"] / jnp.sqrt(stats["var"] + eps)
    return kernel * scale, bn["bias"] - stats["mean"] * scale


def identity_kernel(shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
    """The kernel `[kh, kw, in / groups, out]` of a convolution that returns its input: a one at
    the centre of each output channel's own input within its group."""
    kh, kw, per_group, channels = shape
    eye = jnp.zeros((per_group, channels), dtype)
    eye = eye.at[jnp.arange(channels) % per_group, jnp.arange(channels)].set(1.0)
    return jnp.zeros(shape, dtype).at[kh // 2, kw // 2].set(eye)


def add_centred(kernel: jax.Array, other: jax.Array) -> jax.Array:
    """`kernel + other`, `other` (as small or smaller, odd) zero-padded about its centre."""
    (kh, kw), (oh, ow) = kernel.shape[:2], other.shape[:2]
    top, left = (kh - oh) // 2, (kw - ow) // 2
    return kernel.at[top : top + oh, left : left + ow].add(other)


def fuse_branches(
    params: dict,
    stats: dict,
    eps: float,
    names: Sequence[str],
    identity_shape: Sequence[int] | None = None,
) -> tuple[jax.Array, jax.Array]:
    """One `branches` module's variables -> the fused kernel and bias: the conv-BatchNorm
    branches `names` present in `params` (the largest first), then the identity's BatchNorm
    if there is one, its kernel of the first branch's shape (or `identity_shape`)."""
    pieces = [
        fuse_conv_bn(params[n]["conv"]["kernel"], params[n]["bn"], stats[n]["bn"], eps)
        for n in names
        if n in params
    ]
    if IDENTITY in params:
        shape = pieces[0][0].shape if pieces else identity_shape
        eye = identity_kernel(shape, params[IDENTITY]["scale"].dtype)
        pieces.append(fuse_conv_bn(eye, params[IDENTITY], stats[IDENTITY], eps))
    kernel, bias = pieces[0]
    for k, b in pieces[1:]:
        kernel, bias = add_centred(kernel, k), bias + b
    return kernel, bias
