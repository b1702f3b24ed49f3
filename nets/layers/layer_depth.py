"""Parameter depths for layer-wise learning-rate decay (BEiT), shared by the staged networks.

Each network that supports the decay says its parameters' depths in a `layer_id(path)` method,
from its own module names, as timm's `group_matcher` does for its models.
"""

from collections.abc import Sequence


def stage_block_index(depths: Sequence[int], path: tuple[str, ...]) -> int:
    """The index over all stages of the block that module `path` (`('stages_1', 'blocks_2',
    ...)`, or the stage's own `downsample*` layers: its block 0) belongs to."""
    stage = int(path[0].rpartition("_")[2])
    block = int(path[1].removeprefix("blocks_")) if path[1].startswith("blocks_") else 0
    return sum(depths[:stage]) + block


def stem_stages_head_layer_id(depths: Sequence[int], path: tuple[str, ...]) -> int:
    """The depth of module `path` in a network of `stem_*` layers, `stages_{i}` and a head (timm's
    `group_matcher` for ConvNeXt and InceptionNeXt): 0 for the stem, `1 + n` for the network's
    block `n` (a stage's downsampling with its first block), anything else (the head, its norm
    too) last."""
    if path[0].startswith("stem_"):
        return 0
    if path[0].startswith("stages_"):
        return 1 + stage_block_index(depths, path)
    return 1 + sum(depths)
