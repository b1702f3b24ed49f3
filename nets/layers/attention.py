"""Multi-head attention's parameter-free product, softmax(q k^T / sqrt(d)) v, as a module.

`DotProductAttention` runs `jax.nn.dot_product_attention`, so GPUs get cuDNN's fused kernel where
it applies and XLA's implementation elsewhere; in bfloat16 the logits and the softmax are computed
in float32 (JAX's implementation accumulates `q k^T` in float32 and takes the softmax there; the
fused kernel keeps its statistics in float32). It owns no `kernel`, so it declares its own
multiply-accumulates (`macs`) for `nets_summary`'s count: `q k^T` and `attention v`, each
`heads * queries * keys * head_dim` per image, as fvcore (timm's published GMACs) counts them.
"""

import flax.linen as nn
import jax


class DotProductAttention(nn.Module):
    """`(q, k, v)`, each `[batch, tokens, heads, head_dim]` -> `[batch, tokens, heads, head_dim]`."""

    @nn.compact
    def __call__(self, query: jax.Array, key: jax.Array, value: jax.Array) -> jax.Array:
        return jax.nn.dot_product_attention(query, key, value)

    @staticmethod
    def macs(query: jax.Array, key: jax.Array, value: jax.Array) -> int:
        """The two products' multiply-accumulates: `q k^T` and `attention v`."""
        batch, queries, heads, head_dim = query.shape
        scores = batch * heads * queries * key.shape[1]
        return scores * head_dim + scores * value.shape[-1]
