"""The exact GELU as PyTorch, TensorFlow and Keras compute it: `x / 2 * (1 + erf(x / sqrt(2)))`.

`jax.nn.gelu(x, approximate=False)` (and flax's) is the same function written with erfc,
`x / 2 * erfc(-x / sqrt(2))`, which XLA expands into erf's and erfc's approximations both, one
selected per element, in the backward pass again: on an H200, ViT-S/16's train step spent 3.1 ms
of its 28.5 in the MLPs' forward GELU alone, about 3x what moving its bytes takes.
With erf, forward and backward over ViT-S/16's MLP activations in bfloat16 run 2.2x faster on 2
CPU cores (`bench/elementwise_layers.py`), its train step 1.04x; on the H200, 0.372 against
0.471 ms, and ViT-S/16's train step went from 8,993 to 9,713 img/s.

Computed in float32 at least and rounded once at the end, as PyTorch computes a bfloat16 GELU:
within 2^-8 of the exact value in bfloat16, where `jax.nn.gelu`'s bfloat16 arithmetic strays to
3e-2. In float32, float32's rounding of the exact function except where 1 + erf cancels, below
x = -1: up to 6e-5 of GELU's value near x = -3 (under 8e-7 absolute), as in PyTorch's own.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def gelu(x: jax.Array) -> jax.Array:
    """`torch.nn.GELU()` (`approximate='none'`) in `x`'s dtype."""
    dtype = jnp.promote_types(x.dtype, jnp.float32)
    xf = x.astype(dtype)
    return (0.5 * xf * (1 + lax.erf(xf * np.sqrt(0.5).astype(dtype)))).astype(x.dtype)
