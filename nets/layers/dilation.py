"""Dilation for dense prediction: a backbone's `output_stride` (timm's, DeepLab's atrous networks).

A segmentation head wants the deepest maps at a stride of 16 or 8, not 32. Past that stride the
stages keep their maps' size: a stage that would have strided by `s` strides by 1 and multiplies
the dilation of its convolutions by `s`, so every kernel still sees what it saw, on a finer grid.
The parameters are the same, so weights trained at 32 load unchanged (timm's rule, exactly: its
`make_blocks`, `ResNetStages`, `EfficientNetBuilder`).
"""

from collections.abc import Mapping, Sequence
from functools import partial
from typing import NamedTuple

from nets.layers.conv import ModuleDef


class StageStride(NamedTuple):
    """What a stage does under an `output_stride`."""

    stride: int  # of its first block (1 once the network is at `output_stride`)
    dilation: int  # of its convolutions after the first block's first
    first_dilation: int  # of the first block's first dilated convolution: the stage before's


# The values timm's networks assert (`output_stride in (8, 16, 32)`) and Slim's MobileNet checks.
STANDARD_OUTPUT_STRIDES = (8, 16, 32)


def stage_strides(
    strides: Sequence[int],
    output_stride: int | None,
    start: int,
    taken: Sequence[int] | None = None,
) -> list[StageStride]:
    """Each stage's stride and dilations for `output_stride` (None: the stages as they are);
    `strides` are the stages' own, and `start` the stride of the stages' input (the stem's). The
    values taken are the strides the network reaches after a strided stage, the stem's excepted
    (a ResNet's 8, 16 and 32), and of those only `taken` where the reference allows fewer
    (`STANDARD_OUTPUT_STRIDES`)."""
    if output_stride is None:
        return [StageStride(stride, 1, 1) for stride in strides]
    valid = [s for s in valid_output_strides(strides, start) if taken is None or s in taken]
    if output_stride not in valid:
        raise ValueError(
            f"output_stride={output_stride!r}: expected one of {', '.join(map(str, valid))} "
            "(the last: no dilation)"
        )
    out, reached, dilation = [], start, 1
    for stride in strides:
        previous = dilation
        if reached >= output_stride:
            dilation, stride = dilation * stride, 1
        else:
            reached *= stride
        out.append(StageStride(stride, dilation, previous))
    return out


def valid_output_strides(strides: Sequence[int], start: int) -> list[int]:
    """The `output_stride` values a network of these stage `strides` takes, deepest last."""
    reached, valid = start, []
    for stride in strides:
        reached *= stride
        if stride > 1:
            valid.append(reached)
    return valid


def capped_strides(strides: Mapping[str, int], output_stride: int | None) -> dict[str, int]:
    """A feature pyramid's strides (`feature_strides()`, its levels chosen at the nominal strides)
    once the network stops at `output_stride` (None: as they are): the deeper levels share it, as
    timm's `feature_info` reductions (8, 8, 8 for a ResNet's last three stages at 8)."""
    return {name: min(stride, output_stride or stride) for name, stride in strides.items()}


def dilated(conv: ModuleDef, dilation: int) -> ModuleDef:
    """`conv` (a convolution's constructor) with its kernel dilated by `dilation`; 1: itself."""
    return conv if dilation == 1 else partial(conv, kernel_dilation=dilation)
