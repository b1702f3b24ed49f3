"""Parity fixtures of timm's NASNet-A Large and PNASNet-5 Large (see tools/parity.py for how to
run it).

NASNet: timm's `NASNetALarge` itself, thinned by its own arguments (`stem_size`, and
`num_features`, which is 24 times our `num_conv_filters`). PNASNet: timm's `PNASNet5Large`
hard-codes its widths, so `SmallPNASNet` repeats its constructor with the widths as arguments
(Slim's `num_conv_filters` and stem width), built from timm's own cell classes; the forward pass
is timm's.

timm's stride-2 average pools (`AvgPool2dSame`) pad explicitly and then average over the whole
window; TensorFlow, which trained the weights, leaves the padding out. The NASNet case's
`logits` are timm's network with TensorFlow's pools; `timm_logits` (in the same file) are timm's
network as it is, which differs on the even maps these images give its reduction cells.
"""

import contextlib
from functools import partial

import torch
from parity import ROOT, timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from safetensors.numpy import load_file, save_file
from timm.layers import ConvNormAct, create_classifier, padding, pool2d_same  # noqa: E402
from timm.models import nasnet, pnasnet  # noqa: E402
from torch import nn
from torch.nn import functional as F  # noqa: N812


class SmallPNASNet(pnasnet.PNASNet5Large):
    """`PNASNet5Large` of `filters` (216 in timm's) per state in the first stage, `stem` (96)
    stem channels: timm's constructor with its numbers as multiples of those two."""

    def __init__(self, filters: int, stem: int, num_classes: int = 10):
        nn.Module.__init__(self)
        self.num_classes, self.num_features = num_classes, 20 * filters
        norm = partial(nn.BatchNorm2d, eps=0.001)
        self.conv_0 = ConvNormAct(3, stem, 3, 2, padding=0, norm_layer=norm, apply_act=False)
        f = filters // 4
        self.cell_stem_0 = pnasnet.CellStem0(stem, f, stem, f, pad_type="same")
        # (name, the older input's channels, the input's, filters, reduces, matches older input)
        cells = [("cell_stem_1", stem, 5 * f, 2 * f, True, True)]
        older, channels = 5 * f, 10 * f
        for i in range(12):
            f = filters * 2 ** ((i >= 4) + (i >= 8))
            cells.append((f"cell_{i}", older, channels, f, i in (4, 8), i in (0, 5, 9)))
            older, channels = channels, 5 * f
        for name, left, right, f, reduce, match in cells:
            block = pnasnet.Cell(
                left, f, right, f, "same", is_reduction=reduce, match_prev_layer_dims=match
            )
            setattr(self, name, block)
        self.act = nn.ReLU()
        self.global_pool, self.head_drop, self.last_linear = create_classifier(
            self.num_features, num_classes, drop_rate=0.0
        )


def small_nasnet(filters: int, stem: int) -> nn.Module:
    return nasnet.NASNetALarge(10, stem_size=stem, num_features=24 * filters, pad_type="same")


def _tensorflow_avg_pool2d_same(self, x):
    """`AvgPool2dSame.forward` with TensorFlow's average: the padding left out of the count."""
    pads = padding.pad_same_arg(x.shape[-2:], self.kernel_size, self.stride)
    inside = F.pad(torch.ones_like(x[:1, :1]), pads)
    pool = partial(F.avg_pool2d, kernel_size=self.kernel_size, stride=self.stride)
    return pool(F.pad(x, pads)) / pool(inside)


@contextlib.contextmanager
def tensorflow_pools():
    saved = pool2d_same.AvgPool2dSame.forward
    pool2d_same.AvgPool2dSame.forward = _tensorflow_avg_pool2d_same
    try:
        yield
    finally:
        pool2d_same.AvgPool2dSame.forward = saved


def add_timm_logits(case: str, build) -> None:
    """Adds timm's own logits (its stride-2 average pools) to the case's expected file."""
    folder = ROOT / "parity" / case
    model = build()
    state = {
        k: torch.from_numpy(v).float() for k, v in load_file(folder / "model.safetensors").items()
    }
    model.load_state_dict({k: v.long() if k.endswith("tracked") else v for k, v in state.items()})
    expected = load_file(folder / "expected.safetensors")
    with torch.no_grad():
        logits = model.eval()(torch.from_numpy(expected["images"]).permute(0, 3, 1, 2))
    save_file({**expected, "timm_logits": logits.numpy()}, folder / "expected.safetensors")


# name -> (architecture, the small timm network, image size); the tests hold the matching
# `load_pretrained` keyword arguments. 63 px: maps of 31, 16, 8, 4, 2 after the stem convolution
# and each reduction, odd and even for TensorFlow's SAME padding.
CASES = {
    "pnasnet": ("pnasnet5large", partial(SmallPNASNet, 12, 12), 63),
    "nasnet": ("nasnetalarge", partial(small_nasnet, 8, 12), 63),
}
FULL_SIZE = ["pnasnet5large", "nasnetalarge"]


if __name__ == "__main__":
    with tensorflow_pools():
        for case, (arch, build, size) in CASES.items():
            write_case(case, arch, build, size, calibration_size=size)
    add_timm_logits("nasnet", CASES["nasnet"][1])
    write_index("nasnet", FULL_SIZE)
