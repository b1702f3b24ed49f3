"""PNASNet-5: Liu et al. 2018, "Progressive Neural Architecture Search" (arXiv:1712.00559), as
TF-Slim's `nets/nasnet/pnasnet.py` builds it.

One searched cell serves everywhere: strided (filters doubled) where NASNet-A places its
Reduction cells, and as the two ImageNet stem cells. The network is `nets.nasnet.NASNet` with
`reduction_cell=None`; drop-path works as described there.
"""

from functools import partial
from typing import ClassVar

from nets.nasnet import NASNet
from nets.nasnet_cells import CellSpec

# Slim's PNasNetNormalCell. State 4 is both read by the fourth combination and output.
PNASNET_5 = CellSpec(
    combinations=(
        ("separable_5x5_2", 1, "max_pool_3x3", 1),
        ("separable_7x7_2", 0, "max_pool_3x3", 0),
        ("separable_5x5_2", 0, "separable_3x3_2", 0),
        ("separable_3x3_2", 4, "max_pool_3x3", 0),
        ("separable_3x3_2", 1, "none", 0),
    ),
    outputs=(2, 3, 4, 5, 6),
)


class PNASNet(NASNet):
    """PNASNet-5 at ImageNet sizes; fields and end points as `NASNet` (no `Reduction_Cell_*`)."""

    default_image_size: ClassVar[int] = 331

    normal_cell: CellSpec = PNASNET_5
    reduction_cell: CellSpec | None = None


class PNASNetMobile(PNASNet):
    default_image_size: ClassVar[int] = 224


# Slim's large_imagenet_config and mobile_imagenet_config.
pnasnet_large = partial(
    PNASNet,
    num_cells=12,
    num_conv_filters=216,
    stem_multiplier=3.0,
    drop_path_rate=0.4,
    skip_reduction_layer_input=True,
)
pnasnet_mobile = partial(
    PNASNetMobile,
    num_cells=9,
    num_conv_filters=54,
    stem_multiplier=1.0,
    drop_path_rate=0.0,
    skip_reduction_layer_input=True,
)
