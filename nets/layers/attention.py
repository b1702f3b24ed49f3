"""Multi-head attention's parameter-free product, softmax(q k^T / sqrt(d)) v, as a module.

`DotProductAttention` runs `jax.nn.dot_product_attention`. JAX's default implementation is
XLA's on every backend, so `implementation='auto'` asks for cuDNN's fused kernel on GPUs when
the inputs are bfloat16 or float16, and falls back to XLA's when cuDNN refuses the shapes (JAX
checks them while tracing) or elsewhere; `'xla'` and `'cudnn'` force one. Either keeps the softmax
statistics in float32 under bfloat16: XLA's implementation accumulates `q k^T` in float32 and
takes the softmax there, the fused kernel keeps its running maxima and sums in float32. (Only
the XLA path is exercised by the tests, which run on CPU.)

An additive `bias` (Swin's relative position bias and shifted-window mask, `[batch or 1,
heads, queries, keys]`) is added to the float32 logits on XLA's path, as given; cuDNN's kernel
takes it in the inputs' dtype.

It owns no `kernel`, so it declares its own multiply-accumulates (`macs`) for `nets_summary`'s
count: `q k^T` and `attention v`, each `heads * queries * keys * head_dim` per image, as
PyTorch's `FlopCounterMode` and timm's benchmark tables count them.
"""

from typing import Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

Implementation = Literal["auto", "xla", "cudnn"]


def fused_kernel_applies(dtype: jnp.dtype, backend: str | None = None) -> bool:
    """Whether `'auto'` tries cuDNN's kernel: on a GPU, for half-precision inputs."""
    backend = backend or jax.default_backend()
    return backend == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)


class DotProductAttention(nn.Module):
    """`(q, k, v)`, each `[batch, tokens, heads, head_dim]` -> the same shape as `q`; `bias`, if
    given, `[batch or 1, heads or 1, queries, keys]`, is added to the logits before the softmax."""

    implementation: Implementation = "auto"

    @nn.compact
    def __call__(
        self, query: jax.Array, key: jax.Array, value: jax.Array, bias: jax.Array | None = None
    ) -> jax.Array:
        if self.implementation not in ("auto", "xla", "cudnn"):
            raise ValueError(
                "DotProductAttention.implementation must be 'auto', 'xla' or 'cudnn', "
                f"got {self.implementation!r}"
            )
        if self.implementation == "cudnn" or (
            self.implementation == "auto" and fused_kernel_applies(query.dtype)
        ):
            half = None if bias is None else bias.astype(query.dtype)
            try:
                return jax.nn.dot_product_attention(query, key, value, half, implementation="cudnn")
            except (NotImplementedError, ValueError, RuntimeError):
                if self.implementation == "cudnn":
                    raise
        return jax.nn.dot_product_attention(query, key, value, bias, implementation="xla")

    @staticmethod
    def macs(
        query: jax.Array, key: jax.Array, value: jax.Array, bias: jax.Array | None = None
    ) -> int:
        """The two products' multiply-accumulates: `q k^T` and `attention v` (adding a bias is
        no multiply-accumulate)."""
        batch, queries, heads, head_dim = query.shape
        scores = batch * heads * queries * key.shape[1]
        return scores * head_dim + scores * value.shape[-1]
