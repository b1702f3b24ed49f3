"""timm's Dual Path Network state dicts (`dpn68.mx_in1k`, `dpn68b.ra_in1k`, `dpn92.mx_in1k`, ...),
as our `nets.dpn`.

timm's keys are its flat `features` sequence and the classifier: `features.conv1_1.conv`,
`features.conv2_1.c1x1_w_s1.bn`, `features.conv3_1.c1x1_w_s2.conv`,
`features.conv2_2.c3x3_b.conv`, the "b" networks' `features.conv2_2.c1x1_c1`,
`features.conv5_bn_ac.bn`, then `classifier` (a 1x1 convolution, as ours): our module paths
under `features`, DenseNet's layout. The weights were trained with PyTorch's symmetric padding
and BatchNorm epsilon 1e-3, the family's defaults. Their preprocessing (timm's
`pretrained_cfg`): 224 px at crop 0.875, bicubic; the weights converted from the authors' MXNet
ones (`mx_in1k`) take the mean 124, 117, 104 of [0, 255] RGB and a std of 1 / 0.0167 (59.88),
timm's `dpn68b.ra_in1k` (its default `dpn68b`) ImageNet's mean and std at crop 0.95. `dpn48b` has
no published weights (timm's `untrained`).
"""

from nets_weights.convert import Architecture, same_layout
from nets_weights.densenet import layout

_MXNET = {"mean": (124 / 255, 117 / 255, 104 / 255), "std": (1 / (0.0167 * 255),) * 3}
_PREPROCESSING = {"dpn48b": {}, "dpn68b": {"crop_fraction": 0.95}}
# timm's names, which are ours.
ARCHITECTURES = {
    name: Architecture(
        name,
        {"padding": "SYMMETRIC", "bn_epsilon": 1e-3},
        same_layout(layout),
        head=("classifier",),
        source_head="classifier",
        preprocessing={"interpolation": "bicubic", **_PREPROCESSING.get(name, _MXNET)},
    )
    for name in ("dpn48b", "dpn68", "dpn68b", "dpn92", "dpn98", "dpn107", "dpn131")
}
