"""timm's RepVGG state dicts (`repvgg_a0.rvgg_in1k`, ...), as our `nets.repvgg`.

timm publishes the training form: `stem.conv_kxk.conv` / `.bn`, `stem.conv_1x1.conv` / `.bn`,
block `j` of stage `i` as `stages.{i}.{j}.` `conv_kxk`, `conv_1x1` and (where the block keeps its
input's shape) the BatchNorm `identity`, `repvgg_d2se`'s gate `attn.fc1` / `attn.fc2`, then
`head.fc`. Ours are the same names with `stages_{i}/blocks_{j}`; `nets.repvgg.reparameterize`
fuses the loaded variables for the deploy network. The weights expect ImageNet's mean and std,
bilinear resizing, 224 px at crop 0.875 (`repvgg_d2se`: 320 px uncropped).
"""

from nets_weights.convert import Architecture, same_layout


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `stages_0/blocks_1/identity` -> `stages.0.1.identity`."""
    return ".".join(part.removeprefix("blocks_").replace("stages_", "stages.") for part in path)


_NAMES = ("a0", "a1", "a2", "b0", "b1", "b1g4", "b2", "b2g4", "b3", "b3g4", "d2se")
_D2SE = {"image_size": 320, "crop_fraction": 1.0}
ARCHITECTURES = {
    f"repvgg_{name}": Architecture(
        f"repvgg_{name}",
        {},
        same_layout(layout),
        head=("head", "fc"),
        source_head="head.fc",
        preprocessing=_D2SE if name == "d2se" else {},
    )
    for name in _NAMES
}
