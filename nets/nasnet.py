"""NASNet-A: Zoph et al. 2018, "Learning Transferable Architectures for Scalable Image Recognition"
(arXiv:1707.07012), as TF-Slim's `nets/nasnet/nasnet.py` builds it.

A stack of searched Normal cells with a Reduction cell (stride 2, filters doubled) at 1/3 and 2/3
of the depth. The ImageNet stem is a 3x3/2 convolution followed by two Reduction cells at 1/4 and
1/2 of the filters; the CIFAR stem is one 3x3 convolution. The `NASNet` module also builds PNASNet
(nets/pnasnet.py): one searched cell, strided where NASNet places its Reduction cells.

Drop-path follows Slim: each operation's output (identity paths excepted) is dropped per example
in training, with probability `progress * (cell + 1) / total_cells * drop_path_rate` (Slim's
`drop_path_keep_prob` is `1 - drop_path_rate`: the field has the name stochastic depth has in
every family of the zoo). Slim's `progress` is global step / total training steps, capped at 1;
here it is the `drop_path_progress` call argument, 1.0 unless the caller passes its own:
`train.py` passes `min(1, step / total_steps)`, as Slim's training does.

Published parameter counts (5.3M mobile, 88.9M large) leave out the auxiliary head, which `init`
always creates: it adds 2.4M (mobile) and 4.6M (large) parameters, used in training only.
"""

from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.features import deepest_per_stride
from nets.layers import (
    BatchNormConvention,
    Conv,
    ModuleDef,
    batch_norm,
    checkpointed,
    classify,
    global_avg_pool,
)
from nets.layers.drop_path import check_drop_path_rate
from nets.layers.padding import smallest_input
from nets.nasnet_cells import STRIDED_POOL_PADDINGS, AuxHead, Cell, CellSpec, slim_kernel_init

# Slim's NasNetANormalCell: outputs are every state but the previous cell's.
NASNET_A_NORMAL = CellSpec(
    combinations=(
        ("separable_5x5_2", 0, "separable_3x3_2", 1),
        ("separable_5x5_2", 1, "separable_3x3_2", 1),
        ("avg_pool_3x3", 0, "none", 1),
        ("avg_pool_3x3", 1, "avg_pool_3x3", 1),
        ("separable_3x3_2", 0, "none", 0),
    ),
    outputs=(1, 2, 3, 4, 5, 6),
)
# Slim's NasNetAReductionCell: the combinations read by later ones (2 and 3) are not output.
NASNET_A_REDUCTION = CellSpec(
    combinations=(
        ("separable_5x5_2", 0, "separable_7x7_2", 1),
        ("max_pool_3x3", 0, "separable_7x7_2", 1),
        ("avg_pool_3x3", 0, "separable_5x5_2", 1),
        ("none", 3, "avg_pool_3x3", 2),
        ("separable_3x3_2", 2, "max_pool_3x3", 0),
    ),
    outputs=(3, 4, 5, 6),
)


class StemConv(nn.Module):
    """The stem's convolution and its BatchNorm, `conv_name` and `bn_name` (Slim's `conv0`,
    `conv0_bn`; CIFAR's `l1_stem_3x3`, `l1_stem_bn`). The network shares its scope with it
    (`nn.share_scope`), so they keep Slim's paths while `remat` recomputes them as one unit."""

    features: int
    strides: int
    padding: str
    conv_name: str
    bn_name: str
    conv: ModuleDef
    norm: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        s = self.strides
        x = self.conv(self.features, (3, 3), (s, s), padding=self.padding, name=self.conv_name)(x)
        return self.norm(name=self.bn_name)(x)


def reduction_layers(num_cells: int, num_reduction_layers: int) -> list[int]:
    """The cells that reduce (Slim's `calc_reduction_layers`): evenly spaced, e.g. 18 -> [6, 12]."""
    return [
        int(i / (num_reduction_layers + 1) * num_cells) for i in range(1, num_reduction_layers + 1)
    ]


class NASNet(nn.Module):
    """NASNet-A (and PNASNet, with `reduction_cell=None`) at ImageNet sizes.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features when
    `num_classes` is 0 or None. End points, Slim's names: `Stem`, `Cell_0`.., `Reduction_Cell_0`..,
    `global_pool`; `aux_logits` in training when `use_aux_head`; the contract's `stem`,
    `pre_logits`, `logits`, `predictions`; and ImageNet stems' `conv0` (after its BatchNorm) and
    `cell_stem_0`, the stride-2 and stride-4 maps of the feature pyramid.
    """

    default_image_size: ClassVar[int] = 331

    num_cells: int  # normal cells, reductions and stem excluded
    num_conv_filters: int  # filters per hidden state in the first stage
    stem_multiplier: float
    drop_path_rate: float  # of the last cell, at the end of the drop-path schedule
    # True: the cell after a reduction reads the reduction's older input, not the reduction's own
    # input. (PNASNet has no separate reduction cells; both its configurations set True.)
    skip_reduction_layer_input: bool
    num_classes: int | None = 1000
    normal_cell: CellSpec = NASNET_A_NORMAL
    reduction_cell: CellSpec | None = NASNET_A_REDUCTION  # None: stride the normal cell instead
    stem_type: str = "imagenet"  # or "cifar"
    filter_scaling_rate: float = 2.0
    num_reduction_layers: int = 2
    dense_dropout_keep_prob: float = 0.5
    use_aux_head: bool = True
    bn_momentum: float = 0.9997  # Slim's nasnet_{mobile,large}_arg_scope
    bn_epsilon: float = 1e-3
    # The reduction cells' stride-2 pools: "SAME", TensorFlow's (Slim's); "ZEROS", Keras's, whose
    # zero padding enters the max and the average (nets.nasnet_cells.STRIDED_POOL_PADDINGS).
    strided_pool_padding: str = "SAME"
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, cells recomputed in backward (nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """The ImageNet stem's 3x3/2 'VALID' convolution needs 3 pixels."""
        return 3 if self.stem_type == "imagenet" else 1

    @property
    def min_train_image_size(self) -> int:
        """`init` and training build the auxiliary head after the first reduction cell, whose
        5x5/3 'VALID' pool needs 5 pixels there: 67 at ImageNet sizes, 9 on CIFAR."""
        reductions = reduction_layers(self.num_cells, self.num_reduction_layers)
        if not (self.use_aux_head and self.num_classes and len(reductions) >= 2):
            return self.min_image_size
        stem = [(3, 2, 0), (1, 2, 0), (1, 2, 0)] if self.stem_type == "imagenet" else []
        return smallest_input([*stem, (1, 2, 0), (5, 3, 0)])

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the stem's convolution and first cell (ImageNet stems), then the
        last cell at each stride. timm reads them after the ReLU the next cell applies."""
        reductions = reduction_layers(self.num_cells, self.num_reduction_layers)
        levels = [("conv0", 2), ("cell_stem_0", 4)] if self.stem_type == "imagenet" else []
        stride = 8 if levels else 1
        for i in range(self.num_cells):
            stride *= 2 if i in reductions else 1
            levels.append((f"Cell_{i}", stride))
        return deepest_per_stride(levels)

    @nn.compact
    def __call__(self, x, train: bool = True, drop_path_progress: float | jax.Array = 1.0):
        """Classifies images `x` [batch, height, width, 3].

        `train` switches batch statistics, dropout, drop-path and the auxiliary head;
        `drop_path_progress` in [0, 1] scales drop-path (see the module docstring).
        """
        check_drop_path_rate(self.drop_path_rate)
        if self.strided_pool_padding not in STRIDED_POOL_PADDINGS:
            raise ValueError(
                f"strided_pool_padding must be one of {STRIDED_POOL_PADDINGS}, "
                f"got {self.strided_pool_padding!r}"
            )
        conv = partial(self.conv, use_bias=False, dtype=self.dtype, kernel_init=slim_kernel_init)
        norm = batch_norm(BatchNormConvention(self.bn_momentum, self.bn_epsilon), train, self.dtype)
        reductions = reduction_layers(self.num_cells, self.num_reduction_layers)
        num_stem_cells = 2 if self.stem_type == "imagenet" else 0
        separate_reductions = len(reductions) if self.reduction_cell is not None else 0
        total_cells = self.num_cells + separate_reductions + num_stem_cells

        # Every cell, the stem's too, is checkpointed (and the stem's convolution, `_stem`).
        # Their mode is static (argument 3); so is a Python number's progress (the default 1.0),
        # whose keep probability is then computed in float64 as without remat; train.py's
        # schedule, an array, is traced.
        progress_is_static = isinstance(drop_path_progress, int | float)
        checkpointed_cell = checkpointed(
            Cell, self.remat, static_argnums=(3, 4) if progress_is_static else (3,)
        )

        def cell(spec, filter_scaling, strides, cell_num, name, x, prev):
            # Slim scales drop-path by depth: (cell_num + 1) / total_cells reaches 1 at the top.
            rate = (cell_num + 1) / total_cells * self.drop_path_rate
            features = int(self.num_conv_filters * filter_scaling)
            module = checkpointed_cell(
                spec, features, strides, rate, conv, norm, self.strided_pool_padding, name=name
            )
            return module(x, prev, train, drop_path_progress)

        end_points = {}
        outputs = self._stem(jnp.asarray(x, self.dtype), cell, conv, norm)
        x = end_points["Stem"] = end_points["stem"] = outputs[-1]
        if self.stem_type == "imagenet":
            end_points["conv0"], end_points["cell_stem_0"] = outputs[1:3]

        aux_cell = reductions[1] - 1 if len(reductions) >= 2 else None
        filter_scaling, cell_num = 1.0, num_stem_cells
        for i in range(self.num_cells):
            reduce = i in reductions
            if reduce:
                filter_scaling *= self.filter_scaling_rate
            prev = outputs[-2]
            if reduce and self.reduction_cell is not None:
                r = reductions.index(i)
                name = f"reduction_cell_{r}"
                x = cell(self.reduction_cell, filter_scaling, 2, cell_num, name, x, prev)
                end_points[f"Reduction_Cell_{r}"] = x
                outputs.append(x)
                cell_num += 1
                if not self.skip_reduction_layer_input:
                    prev = outputs[-2]  # the reduction cell's own input
            strides = 2 if reduce and self.reduction_cell is None else 1
            x = cell(self.normal_cell, filter_scaling, strides, cell_num, f"cell_{i}", x, prev)
            end_points[f"Cell_{i}"] = x
            outputs.append(x)
            cell_num += 1
            if i == aux_cell and self.use_aux_head and self.num_classes and train:
                aux = AuxHead(self.num_classes, conv, norm, self.dtype, name=f"aux_{i}")
                end_points["aux_logits"] = aux(nn.relu(x))

        x = end_points["global_pool"] = global_avg_pool(nn.relu(x))
        return classify(
            x,
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=1.0 - self.dense_dropout_keep_prob,
            dtype=self.dtype,
            name="final_layer",
            kernel_init=slim_kernel_init,
        )

    def _stem(self, x, cell, conv, norm):
        """The stem's outputs, oldest first; `None` is the first cell's missing older input."""
        stem_conv = partial(checkpointed(StemConv, self.remat), conv=conv, norm=norm, name="stem")
        if self.stem_type == "cifar":
            filters = int(self.num_conv_filters * self.stem_multiplier)
            module = stem_conv(filters, 1, "SAME", "l1_stem_3x3", "l1_stem_bn")
            nn.share_scope(self, module)  # its layers at Slim's paths (its docstring)
            return [None, module(x)]
        if self.stem_type != "imagenet":
            raise ValueError(f"stem_type must be 'imagenet' or 'cifar', got {self.stem_type!r}")
        module = stem_conv(int(32 * self.stem_multiplier), 2, "VALID", "conv0", "conv0_bn")
        nn.share_scope(self, module)  # its layers at Slim's paths (its docstring)
        outputs = [None, module(x)]
        # Two reduction cells (PNASNet: strided normal cells) at 1/4 and 1/2 of the filters.
        stem_cell = self.normal_cell if self.reduction_cell is None else self.reduction_cell
        for i in range(2):
            scaling = self.filter_scaling_rate ** (i - 2)
            name = f"cell_stem_{i}"
            outputs.append(cell(stem_cell, scaling, 2, i, name, outputs[-1], outputs[-2]))
        return outputs


class NASNetMobile(NASNet):
    default_image_size: ClassVar[int] = 224


class NASNetCifar(NASNet):
    """The CIFAR-10 NASNet-A: a single-convolution stem, Slim's nasnet_cifar_arg_scope."""

    default_image_size: ClassVar[int] = 32

    num_classes: int | None = 10
    stem_type: str = "cifar"
    dense_dropout_keep_prob: float = 1.0
    bn_momentum: float = 0.9
    bn_epsilon: float = 1e-5


# Slim's cifar_config, mobile_imagenet_config and large_imagenet_config (NASNet-A 6@768,
# 4@1056 and 6@4032 in the paper's "N @ penultimate filters" notation).
nasnet_cifar = partial(
    NASNetCifar,
    num_cells=18,
    num_conv_filters=32,
    stem_multiplier=3.0,
    drop_path_rate=0.4,
    skip_reduction_layer_input=False,
)
nasnet_mobile = partial(
    NASNetMobile,
    num_cells=12,
    num_conv_filters=44,
    stem_multiplier=1.0,
    drop_path_rate=0.0,
    skip_reduction_layer_input=False,
)
nasnet_large = partial(
    NASNet,
    num_cells=18,
    num_conv_filters=168,
    stem_multiplier=3.0,
    drop_path_rate=0.3,
    skip_reduction_layer_input=True,
)
