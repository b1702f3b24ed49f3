"""timm's and torchvision's Swin Transformer state dicts, as our `nets.swin`.

timm (`swin_tiny_patch4_window7_224.ms_in1k`, ...; timm >= 0.9 moved patch merging to the start
of stages 1-3): `patch_embed.proj` / `patch_embed.norm`, `layers.{i}.downsample.norm` /
`.reduction`, `layers.{i}.blocks.{j}.norm1` / `attn.qkv` / `attn.proj` /
`attn.relative_position_bias_table` / `norm2` / `mlp.fc1` / `mlp.fc2`, `norm`, `head.fc`. Ours are
the same with `_` for the dots of `layers_{i}` and `blocks_{j}`, and `head`.

torchvision (`swin_t-704ceda3.pth`, ...) numbers one `features` sequence: `features.0.0` / `.2`
the patch embedding's convolution and LayerNorm, `features.{2i + 1}.{j}` stage `i`'s blocks (the
MLP as `mlp.0` / `mlp.3`), `features.{2i}.norm` / `.reduction` stage `i`'s patch merging; `norm`,
`head`. Its weights are the same function at 224 px (see nets/swin.py).

`relative_position_index` (torchvision saves it; older timm files too) and `attn_mask` are
buffers derived from the window size, which the network computes: files may hold them, and they
are skipped as PyTorch's BatchNorm counter `num_batches_tracked` is. The tables keep their shape
`[(2w - 1)^2, heads]` in both and are copied as they are.
"""

import dataclasses
import re

from nets_weights.convert import TORCH, Architecture, Framework, module_index, timm_and_torchvision

_TABLE = "relative_position_bias_table"
FRAMEWORK: Framework = dataclasses.replace(
    TORCH,
    leaves={**TORCH.leaves, _TABLE: (_TABLE,)},
    dropped=(*TORCH.dropped, "relative_position_index", "attn_mask"),
)
_TV_TOP = {("patch_embed", "proj"): "features.0.0", ("patch_embed", "norm"): "features.0.2"}
_TV_MLP = {"fc1": "mlp.0", "fc2": "mlp.3"}


def timm_layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('layers_1', 'blocks_0', 'attn', 'qkv')` ->
    `layers.1.blocks.0.attn.qkv`; `('head',)` -> `head.fc`."""
    if path == ("head",):
        return "head.fc"
    return ".".join(re.sub(r"^(layers|blocks)_(\d+)$", r"\1.\2", part) for part in path)


def torchvision_layout(path: tuple[str, ...]) -> str:
    """Our module path -> torchvision's prefix."""
    if path in _TV_TOP:
        return _TV_TOP[path]
    if len(path) == 1:  # norm, head
        return path[0]
    stage = module_index(path[0], "layers")
    if path[1] == "downsample":
        return ".".join((f"features.{2 * stage}", *path[2:]))
    block = module_index(path[1], "blocks")
    rest = (_TV_MLP[path[3]],) if path[2] == "mlp" else path[2:]
    return ".".join((f"features.{2 * stage + 1}.{block}", *rest))


def _architecture(network: str, torchvision_resize: int) -> Architecture:
    # The preprocessing of files without a config.json: timm's `ms_in1k` pretrained_cfg
    # (bicubic, crop 0.9); torchvision's weights resize to `torchvision_resize` and crop 224,
    # bicubic.
    return timm_and_torchvision(
        network,
        FRAMEWORK,
        timm_layout=timm_layout,
        torchvision_layout=torchvision_layout,
        torchvision_head="head",
        timm_preprocessing={"crop_fraction": 0.9, "interpolation": "bicubic"},
        torchvision_preprocessing={
            "crop_fraction": 224 / torchvision_resize,
            "interpolation": "bicubic",
        },
    )


# timm's names, which are ours, and torchvision's (the same networks).
ARCHITECTURES = {
    name: _architecture(name, resize)
    for names, resize in (
        (("swin_tiny_patch4_window7_224", "swin_t"), 232),
        (("swin_small_patch4_window7_224", "swin_s"), 246),
        (("swin_base_patch4_window7_224", "swin_b"), 238),
    )
    for name in names
}
