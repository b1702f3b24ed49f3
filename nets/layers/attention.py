"""Multi-head attention's parameter-free product, softmax(q k^T / sqrt(d)) v, as a module.

`DotProductAttention` runs `jax.nn.dot_product_attention`. JAX's default implementation is
XLA's on every backend, so `implementation='auto'` asks for cuDNN's fused kernel on GPUs when
the inputs are bfloat16 or float16 and no bias is added (odd lengths padded to an even one, which
the kernel takes in training: `fused_attention`), and falls back to XLA's, with a warning once,
when cuDNN refuses the shapes (JAX checks them while tracing; cuDNN's taking them is said once at
info level); elsewhere XLA's; `'xla'` and `'cudnn'` force one. With a bias `'auto'` takes XLA's
(said once at info level): on an H200, forward and backward in bfloat16, cuDNN's kernel ran
ViT-S/16's attention 1.9x faster than XLA's but Swin-T's 49-token windows, whose bias has a
gradient, at 0.15x (the bias shared by the windows) and 0.70x (the shifted windows' mask added
to it; `bench/attention_speed.py`).
Either keeps the softmax statistics in float32 under bfloat16: XLA's implementation accumulates
`q k^T` in float32 and takes the softmax there, the fused kernel keeps its running maxima and sums
in float32. (Only the XLA path is exercised by the tests, which run on CPU: the padding is, on
XLA's implementation.)

An additive `bias` (Swin's relative position bias and shifted-window mask, `[batch or 1,
heads, queries, keys]`) is added to the float32 logits on XLA's path, as given; cuDNN's kernel
takes it in the inputs' dtype.

It owns no `kernel`, so it declares its own multiply-accumulates (`macs`) for `nets_summary`'s
count: `q k^T` and `attention v`, each `heads * queries * keys * head_dim` per image, as
PyTorch's `FlopCounterMode` and timm's benchmark tables count them.
"""

from collections.abc import Callable
from typing import Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
from absl import logging

Implementation = Literal["auto", "xla", "cudnn"]

_said: set[str] = set()


def say_once(line: str, level: int = logging.WARNING) -> None:
    """Logs `line` the first time: which attention runs is never a silent choice (a fallback is
    a warning; cuDNN's kernel, the choice asked for, is said at info level, `--verbosity=0`)."""
    if line not in _said:
        _said.add(line)
        logging.log(level, "%s", line)


def fused_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    bias: jax.Array | None,
    implementation: Literal["xla", "cudnn"] = "cudnn",
) -> jax.Array:
    """`jax.nn.dot_product_attention` by `implementation`, at a length cuDNN's kernel takes.

    cuDNN's fused attention refuses odd sequence lengths in training (ViT's 197 tokens, Swin's
    49-token windows) and takes even ones. So an odd length is padded by one token, which the
    keys' lengths mask (`key_value_seq_lengths`: no bias needed) and whose query row is dropped:
    the result is the unpadded attention's. A `bias` is padded with zeros. Raises what
    `jax.nn.dot_product_attention` raises for shapes the implementation refuses.
    """
    batch, tokens = query.shape[:2]
    if not pads(query, key):
        return jax.nn.dot_product_attention(query, key, value, bias, implementation=implementation)
    pad = lambda x: jnp.pad(x, [(0, 0), (0, 1), (0, 0), (0, 0)])  # noqa: E731
    if bias is not None:
        bias = jnp.pad(bias, [(0, 0), (0, 0), (0, 1), (0, 1)])
    lengths = jnp.full((batch,), tokens, jnp.int32)
    out = jax.nn.dot_product_attention(
        pad(query),
        pad(key),
        pad(value),
        bias,
        query_seq_lengths=lengths,
        key_value_seq_lengths=lengths,
        implementation=implementation,
    )
    return out[:, :tokens]


def pads(query: jax.Array, key: jax.Array) -> bool:
    """Whether `fused_attention` pads: self-attention over an odd number of tokens."""
    return query.shape[1] % 2 == 1 and query.shape[1] == key.shape[1]


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
        auto_fused = self.implementation == "auto" and fused_kernel_applies(query.dtype)
        if auto_fused and bias is not None:
            say_once(
                f"DotProductAttention: XLA's attention for {query.shape} {query.dtype} queries "
                "with a bias (cuDNN's kernel is slower with one)",
                logging.INFO,
            )
        elif self.implementation == "cudnn" or auto_fused:
            half = None if bias is None else bias.astype(query.dtype)
            try:
                out = fused_attention(query, key, value, half)
            except (NotImplementedError, ValueError, RuntimeError) as refused:
                if self.implementation == "cudnn":
                    raise
                say_once(
                    f"DotProductAttention: cuDNN's fused attention refuses {query.shape} "
                    f"{query.dtype} queries ({str(refused).splitlines()[0]}): XLA's instead"
                )
            else:
                padded = " (padded by one token)" if pads(query, key) else ""
                say_once(
                    f"DotProductAttention: cuDNN's fused attention for {query.shape} "
                    f"{query.dtype} queries{padded}",
                    logging.INFO,
                )
                return out
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


class BiasedProduct(nn.Module):
    """`softmax(q k^T / sqrt(d) + bias) v` for values wider than the keys (LeViT's and
    EfficientFormer's attention, which `jax.nn.dot_product_attention` refuses); the logits and
    softmax in float32."""

    @nn.compact
    def __call__(
        self,
        q: jax.Array,
        k: jax.Array,
        v: jax.Array,
        bias: jax.Array,
        weigh: Callable[[jax.Array], jax.Array] = jax.nn.softmax,
    ) -> jax.Array:
        """`q`: `[batch, queries, heads, d]`; `k`: `[batch, keys, heads, d]`; `v`: `[batch, keys,
        heads, dv]`; `bias`: broadcast to `[batch, heads, queries, keys]` -> `[batch, queries,
        heads, dv]`. `weigh` takes the logits `[batch, heads, queries, keys]` to the weights
        (EfficientFormerV2 mixes the heads before and after the softmax)."""
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
        weights = weigh(logits * q.shape[-1] ** -0.5 + bias.astype(jnp.float32))
        return jnp.einsum("bhqk,bkhd->bqhd", weights.astype(v.dtype), v)

    @staticmethod
    def macs(q: jax.Array, k: jax.Array, v: jax.Array, bias: jax.Array, weigh=None) -> int:
        """`q k^T` and `attention v`, as `DotProductAttention.macs` counts them."""
        return DotProductAttention.macs(q, k, v)
