"""Parity fixtures of timm's pre-activation ResNetV2 (see tools/parity.py for how to run it)."""

from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.layers import BatchNormAct2d, create_conv2d  # noqa: E402
from timm.models.resnetv2 import ResNetV2  # noqa: E402


def small_resnetv2(layers, stem_chs) -> ResNetV2:
    """timm's `resnetv2_50` (BatchNorm + ReLU pre-activations, plain convolutions) at reduced
    depth and width: a `stem_chs` stem, bottlenecks `4 * stem_chs * 2**i` wide (ours are
    `num_filters` wide, for the stem and the first stage's bottleneck alike)."""
    return ResNetV2(
        layers,
        channels=tuple(4 * stem_chs * 2**i for i in range(len(layers))),
        num_classes=10,
        stem_chs=stem_chs,
        conv_layer=create_conv2d,
        norm_layer=BatchNormAct2d,
        zero_init_last=False,  # a zero last convolution would leave the residual branches out
    )


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments. An odd and an even size for the stride-2 padding.
CASES = {
    "resnetv2_50": ("resnetv2_50", lambda: small_resnetv2((2, 1, 1, 1), 8), 45),
    "resnetv2_101": ("resnetv2_101", lambda: small_resnetv2((1, 2, 1, 1), 8), 48),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert.
FULL_SIZE = ["resnetv2_50", "resnetv2_101"]


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index("resnet_v2", FULL_SIZE)
