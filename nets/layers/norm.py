"""BatchNorm as each source library configures it: conventions are data, one line each.

Flax's `momentum` is the decay of the running averages (Slim's `decay`); PyTorch's `momentum=0.1`
is a decay of 0.9. Slim's BatchNorm may leave out the scale (`scale=False`: `beta` only).
"""

from functools import partial
from typing import Any, NamedTuple

from nets.layers.batch_norm import BatchNorm


class BatchNormConvention(NamedTuple):
    momentum: float  # decay of the running statistics
    epsilon: float
    use_scale: bool = True


TORCH = BatchNormConvention(momentum=0.9, epsilon=1e-5)  # torch.nn.BatchNorm2d's defaults
TORCH_INCEPTION = TORCH._replace(epsilon=1e-3)  # torchvision's BasicConv2d (GoogLeNet, Inception)
SLIM = BatchNormConvention(momentum=0.9997, epsilon=1e-3)  # Slim's mobilenet_v1 and nasnet scopes
SLIM_INCEPTION = SLIM._replace(use_scale=False)  # Slim's inception_arg_scope
SLIM_MOBILENET = BatchNormConvention(momentum=0.997, epsilon=1e-3)  # Slim's mobilenet/ (V2, V3)


def batch_norm(convention: BatchNormConvention, train: bool, dtype: Any) -> partial:
    """`BatchNorm` (flax's, with a closed-form training gradient) with `convention`: batch
    statistics in training, running ones otherwise."""
    return partial(
        BatchNorm,
        use_running_average=not train,
        momentum=convention.momentum,
        epsilon=convention.epsilon,
        use_scale=convention.use_scale,
        dtype=dtype,
    )
