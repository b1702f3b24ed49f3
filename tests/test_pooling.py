"""nets.pooling.max_pool: flax.linen.max_pool's values and XLA's gradient, ties included."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from nets.pooling import max_pool

# (input shape, window, strides, padding): ResNet's stem, VGG/LeNet, AlexNet, Inception's
# ceil-mode pads, NASNet's stride-1 SAME.
CASES = [
    ((2, 9, 9, 4), (3, 3), (2, 2), "SAME"),
    ((2, 8, 8, 4), (2, 2), (2, 2), "VALID"),
    ((2, 9, 9, 4), (3, 3), (2, 2), "VALID"),
    ((2, 10, 10, 3), (3, 3), (2, 2), ((0, 1), (0, 1))),
    ((2, 7, 7, 3), (3, 3), (1, 1), "SAME"),
]


@pytest.mark.parametrize("shape, window, strides, padding", CASES)
def test_values_and_gradient_are_flax_linen_max_pool(shape, window, strides, padding):
    rng = np.random.default_rng(0)
    # ReLU outputs rounded to one decimal: many windows tie (all zeros, or equal maxima), and the
    # gradient must go where XLA's sends it, to the first maximum in row-major order.
    x = np.round(np.maximum(rng.standard_normal(shape, np.float32), 0), 1)

    @jax.jit
    def both(x, dy):
        ours, ours_vjp = jax.vjp(lambda x_: max_pool(x_, window, strides, padding), x)
        ref, ref_vjp = jax.vjp(lambda x_: nn.max_pool(x_, window, strides, padding), x)
        return ours, ref, ours_vjp(dy)[0], ref_vjp(dy)[0]

    out_shape = jax.eval_shape(lambda x_: nn.max_pool(x_, window, strides, padding), x).shape
    dy = rng.standard_normal(out_shape, np.float32)
    ours, ref, dx, dx_ref = both(x, dy)
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-6, atol=1e-6)
    assert np.count_nonzero(dx) == np.count_nonzero(dx_ref)


def test_bad_arguments_are_named():
    x = np.zeros((1, 4, 4, 2), np.float32)
    with pytest.raises(ValueError, match=r"padding must be 'SAME', 'VALID' or pairs, got 'FULL'"):
        max_pool(x, (2, 2), (2, 2), "FULL")
    with pytest.raises(ValueError, match=r"got input \(4, 4, 2\)"):
        max_pool(x[0], (2, 2), (2, 2))
