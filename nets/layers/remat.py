"""Gradient checkpointing of a network's blocks: timm's `set_grad_checkpointing`, JAX's remat."""

from functools import partial

import flax.linen as nn

from nets.layers.conv import ModuleDef


def checkpointed(block: ModuleDef, remat: bool, takes_train: bool = False) -> ModuleDef:
    """`block` (a module class, or a partial over one) whose activations the backward pass
    recomputes from its input instead of keeping them, when `remat`: training holds one block's
    activations at a time, for about a third more compute (`jax.checkpoint`). Its parameters,
    names and values are the same. `takes_train`: its `__call__` is `(x, train)`, the mode a
    Python bool."""
    if not remat:
        return block
    static = (2,) if takes_train else ()  # flax counts `self` as argument 0
    if isinstance(block, partial):
        return partial(nn.remat(block.func, static_argnums=static), *block.args, **block.keywords)
    return nn.remat(block, static_argnums=static)
