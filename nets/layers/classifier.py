"""The classifier head every family ends with, and Slim's fully connected layers as convolutions.

`classify` records the contract's end points once: `pre_logits` (the features `[batch, c]`), then,
with a head, dropout, the logits layer, `logits` and `predictions`. Its layers join the calling
module's scope (it is called from a compact `__call__`), so each family keeps the parameter names
its checkpoints have: `Dense_0` (the Flax ImageNet example), `Logits`, `fc`, `final_layer`, or,
with `scope='Logits'`, Slim's `Logits/Conv2d_1c_1x1`.
"""

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers.conv import ModuleDef
from nets.layers.pooling import adaptive_avg_pool, global_avg_pool

EndPoints = dict[str, jax.Array]


def classify(
    features: jax.Array,
    end_points: EndPoints,
    num_classes: int | None,
    *,
    train: bool,
    dropout_rate: float = 0.0,
    dtype: Any = jnp.float32,
    name: str | None = None,
    conv: ModuleDef | None = None,
    kernel_init: nn.initializers.Initializer | None = None,
    scope: str | None = None,
    dense: ModuleDef = nn.Dense,
) -> tuple[jax.Array, EndPoints]:
    """Returns `(logits, end_points)`, or `(features, end_points)` when `num_classes` is 0/None.

    Args:
      features: pooled features `[batch, channels]`.
      name: the logits layer's name; None takes flax's automatic one (`Dense_0`).
      conv: classify with a 1x1 convolution of this constructor (kernel `[1, 1, c, classes]`, as
        Slim's `fc8` and `Conv2d_1c_1x1`) instead of a dense layer.
      kernel_init: the dense layer's initialiser, when not flax's default.
      dense: the logits layer when not a convolution, built as `nn.Dense` is (`features`,
        `dtype`, `name`, `kernel_init`): a head with hidden layers of its own (MetaFormer's MLP
        head) takes the dropped-out features to the logits, which `pre_logits` stays before.
      scope: a module name (Slim's `Logits`) holding the dropout and the logits layer.
    """
    end_points["pre_logits"] = features
    if not num_classes:
        return features, end_points
    head = (num_classes, dropout_rate, dtype, name, conv, kernel_init, dense)
    if scope is None:
        logits = logits_layers(features, train, *head)
    else:
        logits = Logits(*head, name=scope)(features, train)
    end_points["logits"] = logits
    end_points["predictions"] = nn.softmax(logits)
    return logits, end_points


def classify_distilled(
    features: jax.Array,
    cls_features: jax.Array,
    dist_features: jax.Array,
    end_points: EndPoints,
    num_classes: int | None,
    **head: Any,
) -> tuple[jax.Array, EndPoints]:
    """DeiT's two heads over the same classes: `head` on `cls_features`, `head_dist` on
    `dist_features`, `logits` their mean (timm's inference output, and its training one unless
    `set_distilled_training`), each head's in `end_points` (`cls_logits`, `dist_logits`) for a
    distillation loss. `features` are `pre_logits`, returned without a head; `head` is
    `classify`'s keywords (`train`, `dropout_rate`, ...)."""
    features, _ = classify(features, end_points, None, **head)
    if not num_classes:
        return features, end_points
    cls_logits, _ = classify(cls_features, {}, num_classes, name="head", **head)
    dist_logits, _ = classify(dist_features, {}, num_classes, name="head_dist", **head)
    logits = (cls_logits + dist_logits) / 2
    end_points |= {"cls_logits": cls_logits, "dist_logits": dist_logits, "logits": logits}
    end_points["predictions"] = nn.softmax(logits)
    return logits, end_points


def logits_layers(
    features: jax.Array,
    train: bool,
    num_classes: int,
    dropout_rate: float,
    dtype: Any,
    name: str | None,
    conv: ModuleDef | None,
    kernel_init: nn.initializers.Initializer | None,
    dense: ModuleDef = nn.Dense,
) -> jax.Array:
    """Dropout, then the class layer: `dense`, or a 1x1 convolution on a 1x1 map.

    A function, not a module, so that its layers join the scope of the module calling it.
    """
    x = nn.Dropout(dropout_rate, deterministic=not train)(features)
    if conv is not None:
        return conv(num_classes, (1, 1), use_bias=True, name=name)(x[:, None, None, :])[:, 0, 0, :]
    init = {} if kernel_init is None else {"kernel_init": kernel_init}
    return dense(num_classes, dtype=dtype, name=name, **init)(x)


class Logits(nn.Module):
    """`logits_layers` in a scope of their own (Slim's `Logits`); fields as `classify` has them."""

    num_classes: int
    dropout_rate: float
    dtype: Any
    layer_name: str | None
    conv: ModuleDef | None
    kernel_init: nn.initializers.Initializer | None
    dense: ModuleDef = nn.Dense

    @nn.compact
    def __call__(self, features: jax.Array, train: bool) -> jax.Array:
        return logits_layers(
            features,
            train,
            self.num_classes,
            self.dropout_rate,
            self.dtype,
            self.layer_name,
            self.conv,
            self.kernel_init,
            self.dense,
        )


def fully_connected_head(
    x: jax.Array,
    end_points: EndPoints,
    num_classes: int | None,
    conv: ModuleDef,
    window: int,
    widths: tuple[int, int],
    *,
    train: bool,
    dropout_rate: float,
    dropout_inputs: Sequence[str] = ("fc7", "fc8"),
    larger_maps: str = "pool",
) -> tuple[jax.Array, EndPoints]:
    """Slim's fully connected layers as convolutions (AlexNet, OverFeat, VGG), then `classify`.

    `fc6` is a `window x window` 'VALID' convolution over the map brought to that size by adaptive
    average pooling, `fc7` a 1x1 convolution, both with ReLU, and the logits layer `fc8` a 1x1
    convolution; the `fc7` features are `pre_logits`. A Slim checkpoint maps one-to-one, and
    torchvision's `Linear` weight `[out, c, k, k]` becomes the `fc6` kernel by
    `transpose(2, 3, 1, 0)`. `dropout_inputs` names the layers whose inputs are dropped out.

    `larger_maps='slide'` (timm's VGG) pools only maps smaller than the window up to it, slides
    `fc6` and `fc7` over larger ones and averages `fc7`'s map; `'pool'` (torchvision) pools every
    map to the window. Both are the same function up to the window's size.
    """
    if larger_maps not in ("pool", "slide"):
        raise ValueError(f"larger_maps must be 'pool' or 'slide', got {larger_maps!r}")
    size = (window, window)
    if larger_maps == "slide":
        size = tuple(max(n, window) for n in x.shape[1:3])

    def dropout(y: jax.Array, layer: str) -> jax.Array:
        if layer not in dropout_inputs:
            return y
        return nn.Dropout(dropout_rate, deterministic=not train)(y)

    x = dropout(adaptive_avg_pool(x, size), "fc6")
    x = end_points["fc6"] = nn.relu(
        conv(widths[0], (window, window), padding="VALID", name="fc6")(x)
    )
    x = end_points["fc7"] = nn.relu(conv(widths[1], (1, 1), name="fc7")(dropout(x, "fc7")))
    rate = dropout_rate if "fc8" in dropout_inputs else 0.0
    features = global_avg_pool(x)  # of the 1x1 map, or of the slid map
    return classify(
        features, end_points, num_classes, train=train, dropout_rate=rate, conv=conv, name="fc8"
    )
