"""The layers every network family builds from, each defined once.

- `Conv`: `flax.linen.Conv`'s fields and parameters, with a fast CPU path (`nets.layers.cpu`).
- `ConvNormAct`: convolution, normalisation, activation, with the family's parameter names.
- `batch_norm` and its conventions (`TORCH`, `SLIM`, ...): BatchNorm as each library sets it;
  `BatchNorm` is flax's with its training gradient in closed form (fewer passes on CPU).
- pooling: `max_pool`, `avg_pool`, `adaptive_avg_pool`, `global_avg_pool`; padding conventions
  ('SAME', PyTorch's symmetric ints, ceil mode) live in `nets.layers.padding`.
- `classify`: the classifier head and its end points (`classify_distilled`: DeiT's two);
  `fully_connected_head`: Slim's fc6/fc7.
- `DotProductAttention`: attention's product, through `jax.nn.dot_product_attention`.
- `InvertedResidual`, `SqueezeExcite`, `make_divisible`: the MobileNet/EfficientNet block;
  `FusedMBConv`: EfficientNetV2's fused block.
- `drop_path`: stochastic depth of a residual branch (`nets.layers.drop_path` also has the
  linear rule of rates per block, and their check).
- `checkpointed`: a block recomputed in the backward pass when a network's `remat` is set.
- `LayerScale`: a learnt per-channel scale of a residual branch (ViT's, MobileNetV4's).
- `gelu`: the exact GELU as PyTorch computes it (erf's form, cheaper than `jax.nn.gelu`'s erfc).
- `nets.layers.reparam`: structural reparameterization's branches and their fusion (RepVGG's,
  FastViT's MobileOne blocks).
"""

from nets.layers.attention import DotProductAttention
from nets.layers.batch_norm import BatchNorm
from nets.layers.classifier import EndPoints, classify, classify_distilled, fully_connected_head
from nets.layers.conv import Conv, ModuleDef
from nets.layers.conv_norm_act import ConvNormAct
from nets.layers.drop_path import drop_path
from nets.layers.gelu import gelu
from nets.layers.inverted_residual import (
    FusedMBConv,
    InvertedResidual,
    SqueezeExcite,
    make_divisible,
)
from nets.layers.layer_scale import LayerScale
from nets.layers.norm import (
    SLIM,
    SLIM_INCEPTION,
    SLIM_MOBILENET,
    TORCH,
    TORCH_INCEPTION,
    BatchNormConvention,
    batch_norm,
)
from nets.layers.pooling import adaptive_avg_pool, avg_pool, global_avg_pool, max_pool
from nets.layers.remat import checkpointed

__all__ = [
    "SLIM",
    "SLIM_INCEPTION",
    "SLIM_MOBILENET",
    "TORCH",
    "TORCH_INCEPTION",
    "BatchNorm",
    "BatchNormConvention",
    "Conv",
    "DotProductAttention",
    "ConvNormAct",
    "EndPoints",
    "FusedMBConv",
    "InvertedResidual",
    "LayerScale",
    "ModuleDef",
    "SqueezeExcite",
    "adaptive_avg_pool",
    "avg_pool",
    "batch_norm",
    "checkpointed",
    "classify",
    "classify_distilled",
    "drop_path",
    "fully_connected_head",
    "gelu",
    "global_avg_pool",
    "make_divisible",
    "max_pool",
]
