"""Gradient checkpointing of a network's blocks, stem and the layers between blocks: timm's
`set_grad_checkpointing`, JAX's remat."""

from functools import partial

import flax.linen as nn
import jax

from nets.layers.conv import ModuleDef

# What a block's backward pass keeps besides its input, by the name a network's `remat` takes:
# every convolution's and matrix product's output (norms and activations recomputed), or the
# products whose weights are not batched (Transformers' projections, not attention's products).
POLICIES = {
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def checkpoint_policy(remat: bool | str):
    """The `jax.checkpoint` policy that `remat` names: None (keep each block's input only) for
    True; a ValueError naming the valid values for anything else."""
    if remat is True:
        return None
    if isinstance(remat, str) and remat in POLICIES:
        return POLICIES[remat]
    raise ValueError(
        f"remat={remat!r}: use True (each block keeps its input only) or the name of what it "
        f"keeps besides: {', '.join(map(repr, POLICIES))}"
    )


def checkpointed(
    block: ModuleDef,
    remat: bool | str,
    takes_train: bool = False,
    static_argnums: tuple[int, ...] = (),
) -> ModuleDef:
    """`block` (a module class, or a partial over one) whose activations the backward pass
    recomputes from its input instead of keeping them, when `remat`: training holds one block's
    activations at a time, for about a third more compute (`jax.checkpoint`). `block` may also
    be a function whose first argument is the calling module (`fn(module, x)`, flax's lifted
    form): the layers it creates are that module's, at their own paths (a stem's flat names).
    A `remat` of `POLICIES` keeps what it names too and recomputes the rest ('dots_saveable':
    the convolutions' and matrix products' outputs, so only norms and activations run twice).
    Its parameters, names and values are the same. `takes_train`: its `__call__` is
    `(x, train)`, the mode a Python bool. `static_argnums`: the positions of its other Python
    values among the call's arguments (`x` is 1; a mode elsewhere than 2, or more than a mode),
    which `jax.checkpoint` would otherwise trace: every other one must be an array (or None)."""
    if not remat:
        return block
    remat_ = partial(
        nn.remat,
        # flax counts `self` as argument 0
        static_argnums=((2,) if takes_train else ()) + tuple(static_argnums),
        policy=checkpoint_policy(remat),
    )
    if isinstance(block, partial):
        return partial(remat_(block.func), *block.args, **block.keywords)
    return remat_(block)
