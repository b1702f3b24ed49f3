"""nets.layers pooling: flax.linen's values and XLA's gradient for max pooling, ties included;
TensorFlow's, PyTorch's and ceil-mode padding conventions, exactly, on tiny inputs."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nets.layers import avg_pool, max_pool
from nets.layers.padding import pads

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
        ours, ours_vjp = jax.vjp(
            lambda x_: max_pool(x_, window, strides, padding, impl="slices"), x
        )
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
    with pytest.raises(
        ValueError,
        match=r"padding must be 'SAME', 'SYMMETRIC', 'VALID', an int or pairs, got 'FULL'",
    ):
        max_pool(x, (2, 2), (2, 2), "FULL")
    with pytest.raises(ValueError, match=r"\[batch, height, width, channels\], got \(4, 4, 2\)"):
        max_pool(x[0], (2, 2), (2, 2))
    with pytest.raises(ValueError, match=r"impl='cudnn'; valid: auto, slices, xla"):
        max_pool(x, 2, impl="cudnn")
    with pytest.raises(ValueError, match=r"window_shape needs one or two entries, got \(2, 2, 2\)"):
        avg_pool(x, (2, 2, 2))


def test_average_pooling_leaves_same_padding_out_as_tensorflow_does():
    x = jnp.arange(16.0).reshape(1, 4, 4, 1)
    out = avg_pool(x, 3, 1, "SAME", count_include_pad=False)
    np.testing.assert_allclose(out[0, 0, 0, 0], np.mean([0, 1, 4, 5]))  # corner: 4 of 9 cells
    np.testing.assert_allclose(out[0, 1, 1, 0], np.mean([0, 1, 2, 4, 5, 6, 8, 9, 10]))


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("strides, padding", [(1, "SAME"), (2, "SAME"), (3, "VALID"), (2, 1)])
def test_average_pooling_is_flax_linens(strides, padding, count_include_pad):
    x = jax.random.normal(jax.random.key(0), (1, 7, 6, 2))
    flax_padding = ((padding, padding),) * 2 if isinstance(padding, int) else padding
    np.testing.assert_allclose(
        avg_pool(x, 3, strides, padding, count_include_pad),
        nn.avg_pool(x, (3, 3), (strides,) * 2, flax_padding, count_include_pad),
        rtol=1e-6,
    )


def test_padding_conventions():
    # 3x3 at stride 2 on an even map: TensorFlow pads after, PyTorch on both sides.
    assert pads("SAME", (8, 8), (3, 3), (2, 2)) == ((0, 1), (0, 1))
    assert pads("SYMMETRIC", (8, 8), (3, 3), (2, 2)) == ((1, 1), (1, 1))
    assert pads("SYMMETRIC", (7, 7), (7, 7), (2, 2)) == ((3, 3), (3, 3))
    assert pads("same", (7, 9), (3, 3), (2, 2)) == ((1, 1), (1, 1))
    assert pads(2, (5, 5), (3, 3), (1, 1)) == ((2, 2), (2, 2))
    assert pads(((0, 1), (2, 3)), (5, 5), (3, 3), (1, 1)) == ((0, 1), (2, 3))
    x = jnp.arange(64.0).reshape(1, 8, 8, 1)
    torch_like = max_pool(x, 3, 2, "SYMMETRIC")  # MaxPool2d(3, 2, padding=1)
    np.testing.assert_array_equal(torch_like[0, :, 0, 0], [9, 25, 41, 57])
    np.testing.assert_array_equal(max_pool(x, 3, 2, "SAME")[0, :, 0, 0], [18, 34, 50, 58])


def test_max_pool_ceil_mode_keeps_the_partial_window():
    x = jnp.arange(36.0).reshape(1, 6, 6, 1)
    out = max_pool(x, 3, 2, ceil_mode=True)
    # PyTorch: ceil((6 - 3) / 2) + 1 = 3 windows per axis, the last covering rows/columns 4-5.
    assert out.shape == (1, 3, 3, 1)
    np.testing.assert_array_equal(out[0, :, :, 0], [[14, 16, 17], [26, 28, 29], [32, 34, 35]])
    # A window may not start in the right padding: 5 -> 2 windows, not 3.
    assert max_pool(jnp.zeros((1, 5, 5, 1)), 3, 2, 0, ceil_mode=True).shape == (1, 2, 2, 1)
    assert max_pool(jnp.zeros((1, 6, 6, 1)), 2, 2, 1, ceil_mode=True).shape == (1, 4, 4, 1)


@pytest.mark.parametrize("backend, slices", [("cpu", True), ("gpu", True), ("tpu", False)])
def test_auto_max_pool_takes_the_slices_on_cpus_and_gpus(monkeypatch, backend, slices):
    """`'auto'` runs the strided slices (a custom gradient) where they were measured faster, CPUs
    and GPUs (ResNet-50's step on an H200: 1.005x), and XLA's `reduce_window` elsewhere."""
    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    jaxpr = str(jax.make_jaxpr(lambda x: max_pool(x, 3, 2, "SAME"))(jnp.ones((1, 8, 8, 2))))
    assert ("custom_vjp_call" in jaxpr) == slices
    assert ("reduce_window_max" in jaxpr) != slices
