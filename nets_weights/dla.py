"""timm's DLA state dicts, as our `nets.dla`: the same module paths, timm's `nn.Sequential`
indices (`base_layer.0`, `level1.1`, `level2.project.0`) being flax's `layers_{i}`, and the 1x1
convolution classifier `fc` our dense layer (its `[out, in, 1, 1]` weight viewed as `[out, in]`).
timm's files have no projections in trees deeper than one level (the official code's were never
used); nor has our network. The weights' preprocessing: 224 px, crop 0.875, bilinear, ImageNet's
mean and std.
"""

import re

from nets_weights.convert import Architecture, same_layout

_SEQUENTIAL = re.compile(r"^layers_(\d+)$")


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('level2', 'project', 'layers_0')` ->
    `level2.project.0`."""
    return ".".join(_SEQUENTIAL.sub(r"\1", part) for part in path)


def _architecture(network: str) -> Architecture:
    # The function is timm's at our defaults (symmetric padding, PyTorch's BatchNorm epsilon).
    return Architecture(
        network,
        {},
        same_layout(layout),
        head=("fc",),
        source_head="fc",
        preprocessing={"image_size": 224, "crop_fraction": 0.875, "interpolation": "bilinear"},
    )


# timm's names, which are ours.
ARCHITECTURES = {
    name: _architecture(name)
    for name in (
        *("dla34", "dla46_c", "dla46x_c", "dla60", "dla60x", "dla60x_c"),
        *("dla102", "dla102x", "dla102x2", "dla169"),
    )
}
