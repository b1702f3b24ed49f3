"""timm's Xception state dicts, as our `nets.xception`.

timm's `legacy_xception` (Cadene's port of Keras's weights) numbers each block's layers as its
`nn.Sequential` does: ReLU, separable convolution, BatchNorm per repetition, so separable
convolution `j` is `block{i}.rep.{3j - 2}` and its BatchNorm `rep.{3j - 1}`, one less in the
first block, which has no leading ReLU. The shortcut is `block{i}.skip` / `skipbn`; the rest
(`conv1`, `bn1`, `conv2`, `bn2`, `conv3.conv1` / `.pointwise`, `bn3`, `conv4`, `bn4`, `fc`) are
our paths with dots. The weights expect Inception's preprocessing: [-1, 1] inputs (mean and std
0.5), 299 pixels cropped at 0.8975, bicubic.

timm's aligned Xceptions (`xception41` .. `xception65p`) hold our paths with dots, the blocks'
separable convolutions under `stack` (`blocks.3.stack.conv2.conv_dw`, `bn_dw`, `conv_pw`, `bn_pw`;
pre-activated: `norm`, `conv_dw`, `conv_pw`), `blocks.{i}.shortcut` (`.conv`, `.bn`), `stem.0`,
`stem.1`, `head.fc`. Inception's mean and std too, bicubic, 299 pixels cropped at 0.903 (the
TensorFlow ports, `tf_in1k`) or 0.94 (timm's `ra3_in1k`).
"""

from nets_weights.convert import Architecture, same_layout


def legacy_layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix (`('block2', 'sep1', 'pointwise')` ->
    `block2.rep.1.pointwise`)."""
    if not path[0].startswith("block") or path[1].startswith("skip"):
        return ".".join(path)
    leading_relu = path[0] != "block1"
    j = int(path[1].removeprefix("sep").removeprefix("bn"))
    index = 3 * (j - 1) + leading_relu + path[1].startswith("bn")
    return ".".join((path[0], "rep", str(index), *path[2:]))


def aligned_layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix (`('blocks_3', 'conv2', 'conv_dw')` ->
    `blocks.3.stack.conv2.conv_dw`)."""
    parts = [
        part.replace("_", ".", 1) if part[-1].isdigit() and "_" in part else part for part in path
    ]
    if path[0].startswith("blocks_") and path[1].startswith("conv"):
        parts.insert(1, "stack")
    return ".".join(parts)


_HALF = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}  # Inception's: inputs in [-1, 1]


def _aligned(network: str, epsilon: float, crop: float) -> Architecture:
    return Architecture(
        network,
        {"bn_epsilon": epsilon},
        same_layout(aligned_layout),
        head=("head", "fc"),
        source_head="head.fc",
        preprocessing={
            "image_size": 299,
            "crop_fraction": crop,
            "interpolation": "bicubic",
            **_HALF,
        },
    )


ARCHITECTURES = {
    "legacy_xception": Architecture(
        "legacy_xception",
        {},
        same_layout(legacy_layout),
        head=("fc",),
        source_head="fc",
        preprocessing={
            "image_size": 299,
            "crop_fraction": 0.8975,
            "interpolation": "bicubic",
            **_HALF,
        },
    ),
    # timm's default weights of each: DeepLab's TensorFlow ones for 41 and 71, timm's for the rest
    # (xception65's `tf_in1k` crop 0.903 come with their config.json); 41p's BatchNorm epsilon is
    # PyTorch's.
    "xception41": _aligned("xception41", 1e-3, 0.903),
    "xception65": _aligned("xception65", 1e-3, 0.94),
    "xception71": _aligned("xception71", 1e-3, 0.903),
    "xception41p": _aligned("xception41p", 1e-5, 0.94),
    "xception65p": _aligned("xception65p", 1e-3, 0.94),
}
