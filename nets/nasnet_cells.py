"""The cell machinery NASNet-A and PNASNet share: TF-Slim's `nets/nasnet/nasnet_utils.py`.

Zoph et al. 2018, "Learning Transferable Architectures for Scalable Image Recognition"
(arXiv:1707.07012), section 3 and appendix A; Liu et al. 2018, "Progressive Neural Architecture
Search" (arXiv:1712.00559) reuses the same cell template with its own operations.

A cell reads two hidden states -- the previous cell's output (state 0, through a ReLU-1x1-BN) and
the output of the cell before it (state 1, resized to match) -- and runs five combinations. Each
combination applies one operation to each of two existing states and adds the results, making a
new state. The cell's output concatenates some of the states along channels.
"""

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import ModuleDef, avg_pool, max_pool
from nets.layers.padding import pads

# Slim's arg scope initialises every conv and fully connected kernel with
# `variance_scaling_initializer(mode='FAN_OUT')`: a truncated normal of variance 2 / fan_out.
slim_kernel_init = nn.initializers.variance_scaling(2.0, "fan_out", "truncated_normal")
# A depthwise kernel is HWIO [k, k, 1, C] here but [k, k, C, 1] in TF, whose fan_out is k * k.
depthwise_kernel_init = nn.initializers.variance_scaling(
    2.0, "fan_out", "truncated_normal", in_axis=-1, out_axis=-2
)

# Slim's operation names -> (kind, kernel size, stacked layers). `separable_KxK_2` is Slim's
# "stacked" separable convolution: (ReLU -> separable conv -> BN) twice.
OPERATIONS = {
    "separable_3x3_2": ("separable", 3, 2),
    "separable_5x5_2": ("separable", 5, 2),
    "separable_7x7_2": ("separable", 7, 2),
    "avg_pool_3x3": ("avg_pool", 3, 1),
    "max_pool_3x3": ("max_pool", 3, 1),
    "none": ("none", 1, 0),
}
# How a stride-2 pool pads: "SAME" is TensorFlow's (Slim's), whose padding neither enters the max
# nor counts in the average; "ZEROS" is Keras's NASNet (`ZeroPadding2D(correct_pad(...))`, then
# 'valid' pools: SAME's pixels, as zeros that may win the max and count in the average).
STRIDED_POOL_PADDINGS = ("SAME", "ZEROS")


class CellSpec(NamedTuple):
    """One searched cell.

    combinations: five `(left operation, left input, right operation, right input)`; inputs index
      the hidden states (0: previous cell, 1: the cell before it, 2 + i: combination i).
    outputs: the hidden states concatenated into the cell's output. Slim stores the complement,
      `used_hiddenstates`, which is *not* "used as an input": PNASNet's state 4 is both.
    """

    combinations: tuple[tuple[str, int, str, int], ...]
    outputs: tuple[int, ...]


def separable_conv(x, conv: ModuleDef, features: int, k: int, strides: int, name: str):
    """Slim's `separable_conv2d` with depth multiplier 1: depthwise KxK, then pointwise 1x1.

    A function rather than a module: a wrapper module per separable layer made abstract tracing
    of these ~1,000-layer networks 15% slower. The two convolutions belong to the calling module
    as `{name}_depthwise` and `{name}_pointwise` (Slim: `{name}/depthwise_weights`, ...).
    """
    channels = x.shape[-1]
    x = conv(
        channels,
        (k, k),
        (strides, strides),
        feature_group_count=channels,
        kernel_init=depthwise_kernel_init,
        name=f"{name}_depthwise",
    )(x)
    return conv(features, (1, 1), name=f"{name}_pointwise")(x)


class FactorizedReduction(nn.Module):
    """Matches a state to `features` channels, halving its size when `strides` is 2.

    Striding alone would drop three pixels in four; instead two 1x1 convolutions read the even and
    the odd (shifted by one, zero-padded) pixels, and their outputs are concatenated.
    """

    features: int
    strides: int
    conv: ModuleDef
    norm: ModuleDef

    @nn.compact
    def __call__(self, x):
        if self.strides == 1:
            x = self.conv(self.features, (1, 1), name="path_conv")(x)
            return self.norm(name="path_bn")(x)
        s = self.strides
        path1 = self.conv(self.features // 2, (1, 1), name="path1_conv")(x[:, ::s, ::s])
        shifted = jnp.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)))[:, 1::s, 1::s]
        # An odd number of features gives the extra one to the second path, as Slim does.
        path2 = self.conv(self.features - self.features // 2, (1, 1), name="path2_conv")(shifted)
        return self.norm(name="final_path_bn")(jnp.concatenate([path1, path2], axis=-1))


class Operation(nn.Module):
    """One of a combination's two branches: Slim's `_apply_conv_operation`, less drop-path."""

    operation: str
    features: int
    strides: int
    conv: ModuleDef
    norm: ModuleDef
    strided_pool_padding: str = "SAME"  # one of STRIDED_POOL_PADDINGS

    @nn.compact
    def __call__(self, x):
        kind, k, num_layers = OPERATIONS[self.operation]
        s = self.strides
        if kind == "none":
            if s > 1 or x.shape[-1] != self.features:
                x = self.conv(self.features, (1, 1), (s, s), name="conv_1x1")(nn.relu(x))
                x = self.norm(name="bn_1")(x)
        elif kind == "separable":
            for n in range(1, num_layers + 1):
                name = f"separable_{k}x{k}_{n}"
                x = separable_conv(
                    nn.relu(x), self.conv, self.features, k, s if n == 1 else 1, name
                )
                x = self.norm(name=f"bn_sep_{k}x{k}_{n}")(x)
        else:
            zeros = s > 1 and self.strided_pool_padding == "ZEROS"
            if kind == "avg_pool":  # TF's SAME average does not count the padding
                x = avg_pool(x, k, s, "SAME", count_include_pad=zeros)
            else:
                if zeros:
                    x = jnp.pad(x, ((0, 0), *pads("SAME", x.shape[1:3], (k, k), (s, s)), (0, 0)))
                x = max_pool(x, (k, k), (s, s), padding="VALID" if zeros else "SAME")
            if x.shape[-1] != self.features:
                x = self.norm(name="bn_1")(self.conv(self.features, (1, 1), name="conv_1x1")(x))
        return x


class Cell(nn.Module):
    """A NASNet-style cell of `features` filters per state (Slim's `NasNetABaseCell`).

    `strides` 2 makes it a reduction: the operations reading the two input states stride.
    Output: [batch, h / strides, w / strides, len(spec.outputs) * features].

    Drop-path (Slim's `drop_path`, training only): each operation's output, identities excepted,
    is zeroed for a whole example with probability 1 - keep and otherwise scaled by 1 / keep, where
    keep = 1 - drop_path_progress * drop_path_rate; `drop_path_rate` is already scaled by the
    cell's depth. One draw from the 'dropout' stream serves the whole cell.
    """

    spec: CellSpec
    features: int
    strides: int
    drop_path_rate: float
    conv: ModuleDef
    norm: ModuleDef
    strided_pool_padding: str = "SAME"  # one of STRIDED_POOL_PADDINGS

    @nn.compact
    def __call__(self, x, prev, train: bool, drop_path_progress: float | jax.Array = 1.0):
        prev = self._match_prev(prev, x)
        x = self.conv(self.features, (1, 1), name="conv_1x1")(nn.relu(x))
        states = [self.norm(name="beginning_bn")(x), prev]
        drop_path = train and self.drop_path_rate > 0.0
        if drop_path:
            keep = 1.0 - drop_path_progress * self.drop_path_rate
            shape = (len(self.spec.combinations), 2, x.shape[0], 1, 1, 1)
            noise = jax.random.uniform(self.make_rng("dropout"), shape)
            scales = (jnp.floor(keep + noise) / keep).astype(x.dtype)
        for i, (left_op, left, right_op, right) in enumerate(self.spec.combinations):
            h = []
            for side, (op, index) in enumerate(((left_op, left), (right_op, right))):
                y = Operation(
                    op,
                    self.features,
                    self.strides if index < 2 else 1,  # only the cell's inputs are strided
                    self.conv,
                    self.norm,
                    self.strided_pool_padding,
                    name=f"comb_iter_{i}_{('left', 'right')[side]}",
                )(states[index])
                if drop_path and op != "none":  # Slim never drops an identity path
                    y = y * scales[i, side]
                h.append(y)
            states.append(h[0] + h[1])
        return self._concat_outputs(states)

    def _match_prev(self, prev, x):
        """Brings the older input to `x`'s size and `features` channels (`_reduce_prev_layer`)."""
        if prev is None:  # the first cell reads its one input twice
            return x
        if prev.shape[1:3] != x.shape[1:3]:
            return FactorizedReduction(
                self.features, 2, self.conv, self.norm, name="prev_reduction"
            )(nn.relu(prev))
        if prev.shape[-1] != self.features:
            prev = self.conv(self.features, (1, 1), name="prev_1x1")(nn.relu(prev))
            return self.norm(name="prev_bn")(prev)
        return prev

    def _concat_outputs(self, states):
        """Concatenates `spec.outputs`, first resizing any that differ from the last state."""
        last = states[-1]
        outputs = []
        for index in self.spec.outputs:
            h = states[index]
            if h.shape[1:] != last.shape[1:]:
                strides = 1 if h.shape[1:3] == last.shape[1:3] else 2
                h = FactorizedReduction(
                    last.shape[-1], strides, self.conv, self.norm, name=f"reduction_{index}"
                )(h)
            outputs.append(h)
        return jnp.concatenate(outputs, axis=-1)


class AuxHead(nn.Module):
    """The auxiliary classifier (Slim's `_build_aux_head`), reading the ReLU of a cell's output."""

    num_classes: int
    conv: ModuleDef
    norm: ModuleDef
    dtype: Any

    @nn.compact
    def __call__(self, x):
        x = avg_pool(x, 5, 3)
        x = nn.relu(self.norm(name="aux_bn0")(self.conv(128, (1, 1), name="proj")(x)))
        # A convolution as large as the feature map: a fully connected layer over [h, w, 128].
        x = self.conv(768, x.shape[1:3], padding="VALID", name="conv")(x)
        x = nn.relu(self.norm(name="aux_bn1")(x))
        x = x.reshape(x.shape[0], -1)
        return nn.Dense(
            self.num_classes, dtype=self.dtype, kernel_init=slim_kernel_init, name="FC"
        )(x)
