"""timm's Xception state dicts, as our `nets.xception`.

timm's `legacy_xception` (Cadene's port of Keras's weights) numbers each block's layers as its
`nn.Sequential` does: ReLU, separable convolution, BatchNorm per repetition, so separable
convolution `j` is `block{i}.rep.{3j - 2}` and its BatchNorm `rep.{3j - 1}`, one less in the
first block, which has no leading ReLU. The shortcut is `block{i}.skip` / `skipbn`; the rest
(`conv1`, `bn1`, `conv2`, `bn2`, `conv3.conv1` / `.pointwise`, `bn3`, `conv4`, `bn4`, `fc`) are
our paths with dots. The weights expect Inception's preprocessing: [-1, 1] inputs (mean and std
0.5), 299 pixels cropped at 0.8975, bicubic.
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
            "mean": (0.5, 0.5, 0.5),
            "std": (0.5, 0.5, 0.5),
        },
    ),
}
