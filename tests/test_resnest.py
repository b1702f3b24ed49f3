"""ResNeSt and Res2Net: timm's parameter counts and MACs, and the gradient in training (their
numerics: the parity fixtures, tests/test_pretrained_resnest.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from tests.test_nets_factory import numpy_variables

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# ResNeSt-14d: the deep stem 3*3*(3*32 + 32*32 + 32*64) + BatchNorms 2*(32 + 32 + 64) = 29,184;
# a block of width w (64, 128, 256, 512 at 1, 2, 4, 8 times 64) out 4w: conv1 4w*w / 2 (the
# first block reads 64), the split attention's 3x3 9*w*2w (2 groups of w/2 in, w each) + bn0
# 2*2w, fc1 w*h + h and bn1 2*h (h = max(32, w/2)), fc2 h*2w + 2w, conv3 w*4w, bn1 and bn3
# 2*w + 2*4w, the averaging shortcut's conv and BatchNorm; the head 2048*1000 + 1000. In all:
# 10,611,688.
PUBLISHED_COUNTS = {
    "resnest14d": 10_611_688,
    "resnest26d": 17_069_448,
    "resnest50d": 27_483_240,
    "resnest101e": 48_275_016,
    "resnest200e": 70_201_544,
    "resnest269e": 110_929_480,
    "resnest50d_4s2x40d": 30_417_592,
    "resnest50d_1s4x24d": 25_677_000,
    "res2net50_26w_4s": 25_699_120,
    "res2net101_26w_4s": 45_206_688,
    "res2net50_26w_6s": 37_051_448,
    "res2net50_26w_8s": 48_403_776,
    "res2net50_48w_2s": 25_287_304,
    "res2net50_14w_8s": 25_059_816,
    "res2next50": 24_671_464,
    "res2net50d": 25_718_352,
    "res2net101d": 45_225_920,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (its
# convolutions' and the head's; the pools and the softmax count nothing in either).
TORCH_MACS = {
    "resnest14d": 2_749_405_184,
    "resnest50d": 5_371_160_576,
    "resnest50d_4s2x40d": 4_369_060_736,
    "resnest50d_1s4x24d": 4_399_827_456,
    "res2net50_26w_4s": 4_255_166_464,
    "res2next50": 4_172_677_120,
    "res2net50d": 4_494_807_040,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def test_gradient_reaches_every_parameter_but_the_attention_mlps_first_bias():
    """In training the split attention's BatchNorm subtracts the batch mean of `fc1`'s outputs,
    and with it `fc1`'s bias (timm's layer has one; it counts in evaluation): its gradient is
    rounding noise. Every other parameter's is not."""
    small = {"num_filters": 8, "stage_sizes": (1, 1), "stem_widths": (4, 4)}
    fn = nets_factory.get_network_fn("resnest14d", num_classes=10, is_training=True, **small)
    images = jax.random.normal(jax.random.key(1), (2, 32, 32, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))

    def loss(params):
        (logits, _), _ = fn.apply({**variables, "params": params}, images, mutable=["batch_stats"])
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    grads = jax.jit(jax.grad(loss))(variables["params"])
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        largest = float(np.max(np.abs(g)))
        if jax.tree_util.keystr(path).endswith("['fc1']['bias']"):
            assert largest < 1e-4, jax.tree_util.keystr(path)
        else:
            assert largest > 1e-4, jax.tree_util.keystr(path)
