"""LayerScale (Touvron et al. 2021, CaiT): a learnt per-channel scale of a residual branch."""

import flax.linen as nn
import jax


class LayerScale(nn.Module):
    """`x * gamma`, `gamma` a learnt scale per channel (the last axis) started at `init_values`:
    it lets deep networks start near the identity (timm's `LayerScale` and `LayerScale2d`; ViT's
    DeiT III and DINOv2, MobileNetV4's hybrids). `gamma` is float32, applied in `x`'s dtype."""

    init_values: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        gamma = self.param("gamma", nn.initializers.constant(self.init_values), (x.shape[-1],))
        return x * gamma.astype(x.dtype)
