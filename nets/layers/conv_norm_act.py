"""Convolution, normalisation, activation: the layer every convolutional family repeats."""

from collections.abc import Callable, Sequence

import flax.linen as nn
import jax

from nets.layers.conv import ModuleDef
from nets.layers.dilation import dilated
from nets.layers.padding import PaddingLike, pair


class ConvNormAct(nn.Module):
    """`act(norm(conv(x)))` (timm's `ConvNormAct`, Slim's `conv2d` under a `normalizer_fn`).

    `norm=None` gives a biased convolution without normalisation (Slim's `normalizer_fn=None`);
    `act=None` no activation; `groups=channels` a depthwise convolution. `conv_name` and
    `norm_name` name the two submodules so each family keeps its checkpoints' paths: Slim's
    Inception `conv`/`BatchNorm`, Slim's MobileNets and torchvision's `conv`/`bn`.
    """

    features: int
    kernel_size: int | Sequence[int]
    conv: ModuleDef
    norm: ModuleDef | None
    act: Callable | None = None
    strides: int = 1
    padding: PaddingLike = "SAME"
    groups: int = 1
    conv_name: str = "conv"
    norm_name: str = "bn"
    # Whether the convolution has a bias; None: only without a norm (timm's EfficientFormerV2
    # biases its convolutions before their BatchNorms too).
    conv_bias: bool | None = None
    dilation: int = 1  # the kernel's (a backbone's `output_stride`, `nets.layers.dilation`)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """`[n, h, w, c] -> [n, h / strides, w / strides, features]` (SAME padding)."""
        conv = dilated(self.conv, self.dilation)
        x = conv(
            self.features,
            pair(self.kernel_size, "kernel_size"),
            pair(self.strides, "strides"),
            padding=self.padding,
            feature_group_count=self.groups,
            use_bias=self.norm is None if self.conv_bias is None else self.conv_bias,
            name=self.conv_name,
        )(x)
        if self.norm is not None:
            x = self.norm(name=self.norm_name)(x)
        return x if self.act is None else self.act(x)
