"""nets.layers.Conv: XLA's numerics and flax.linen.Conv's parameters, on every CPU path."""

from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax import lax

import nets_factory
from nets.layers import Conv
from nets.layers.cpu import conv as conv_cpu
from tests.helpers import numpy_variables


def relative_error(a, b):
    a, b = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    return float(jnp.linalg.norm(a - b) / jnp.maximum(jnp.linalg.norm(b), 1e-30))


# (input [n, h, w, c], features, kernel, strides, padding, groups): the shapes the zoo uses.
CASES = {
    "1x1": ((2, 7, 7, 8), 16, 1, 1, "SAME", 1),
    "1x1_stride2_projection": ((2, 9, 9, 8), 16, 1, 2, "VALID", 1),
    "3x3_same": ((2, 10, 10, 4), 8, 3, 1, "SAME", 1),
    "3x3_stride2_same": ((2, 9, 9, 4), 8, 3, 2, "SAME", 1),
    "3x3_valid": ((2, 9, 9, 4), 8, 3, 1, "VALID", 1),
    "3x3_on_2x2": ((2, 2, 2, 8), 8, 3, 1, "SAME", 1),
    "3x3_on_1x1": ((2, 1, 1, 8), 8, 3, 1, "SAME", 1),
    "3x3_stride2_to_2x2": ((2, 4, 4, 8), 8, 3, 2, "SAME", 1),
    "5x5_explicit": ((2, 8, 8, 3), 4, 5, 1, ((2, 2), (2, 2)), 1),
    "5x5_asymmetric": ((2, 8, 8, 3), 4, 5, 1, ((1, 3), (0, 2)), 1),
    "7x7_stride2_stem": ((2, 16, 16, 3), 8, 7, 2, 3, 1),
    "7x7_on_4x4": ((2, 4, 4, 3), 4, 7, 1, 3, 1),
    "7x7_on_5x3_valid": ((2, 9, 3, 3), 4, 7, 1, ((0, 0), (2, 2)), 1),
    "11x11_stride4_alexnet": ((2, 23, 23, 3), 8, 11, 4, 2, 1),
    "grouped_resnext": ((2, 8, 8, 16), 16, 3, 1, "SAME", 4),
    "grouped_stride2": ((2, 9, 9, 16), 16, 3, 2, "SAME", 4),
    "grouped_on_2x2": ((2, 2, 2, 16), 16, 3, 1, "SAME", 4),
    "depthwise": ((2, 8, 8, 6), 6, 3, 1, "SAME", 6),
    "depthwise_stride2": ((2, 9, 9, 6), 6, 3, 2, "SAME", 6),
    "depthwise_5x5_on_3x3": ((2, 3, 3, 6), 6, 5, 1, "SAME", 6),
    "depthwise_multiplier2": ((2, 7, 7, 3), 6, 3, 1, "SAME", 3),
    "depthwise_5x5_stride2_odd": ((2, 9, 9, 6), 6, 5, 2, "SAME", 6),
    "depthwise_5x5_stride2_even": ((2, 8, 8, 4), 4, 5, 2, "SAME", 4),
    "depthwise_7x7_multiplier2": ((2, 8, 8, 3), 6, 7, 1, "SAME", 3),
}


def conv_and_grads(apply, params, x, dy):
    y, vjp = jax.vjp(apply, params, x)
    dparams, dx = vjp(dy.astype(y.dtype))
    return y, dx, dparams


def reference(strides, padding, groups):
    """lax.conv_general_dilated + bias: XLA's own convolution (and, by jax.vjp, its gradient)."""
    if isinstance(padding, int):
        padding = ((padding, padding),) * 2

    def apply(params, x):
        y = lax.conv_general_dilated(
            x,
            params["kernel"],
            (strides, strides),
            padding,
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=groups,
            precision=lax.Precision.HIGHEST,
        )
        return y + params["bias"]

    return apply


def ours_and_reference(case, dtype=None):
    """Both convolutions' (y, dx, dparams) on random inputs, in one compiled function."""
    shape, features, k, strides, padding, groups = CASES[case]
    module = Conv(
        features, (k, k), strides, padding, feature_group_count=groups, dtype=dtype, impl="cpu_fast"
    )
    # numpy's generator: jax.random would compile a sampler for every shape (seconds each).
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, np.float32)
    shapes = jax.eval_shape(module.init, jax.random.key(0), x)["params"]
    params = {k: rng.standard_normal(v.shape, np.float32) / 3 for k, v in shapes.items()}
    dy = rng.standard_normal(jax.eval_shape(module.apply, {"params": params}, x).shape, np.float32)

    @jax.jit
    def both(params, x, dy):
        ours = conv_and_grads(lambda p, x_: module.apply({"params": p}, x_), params, x, dy)
        return ours, conv_and_grads(reference(strides, padding, groups), params, x, dy)

    return both(params, x, dy)


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_and_gradients_match_xla(case):
    (y, dx, dparams), (y_ref, dx_ref, dparams_ref) = ours_and_reference(case)
    assert y.shape == y_ref.shape
    assert relative_error(y, y_ref) <= 1e-5
    assert relative_error(dx, dx_ref) <= 1e-5
    assert relative_error(dparams["kernel"], dparams_ref["kernel"]) <= 1e-5
    assert relative_error(dparams["bias"], dparams_ref["bias"]) <= 1e-5


@pytest.mark.parametrize("case", ["3x3_stride2_same", "7x7_on_4x4", "1x1_stride2_projection"])
def test_filter_gradient_without_room_for_patches_matches_xla(case, monkeypatch):
    """Above the im2col size limit the filter gradient is XLA's own (1x1 kernels need no room)."""
    monkeypatch.setattr(conv_cpu, "_PATCHES_MAX_ELEMENTS", 0)
    (_, dx, dparams), (_, dx_ref, dparams_ref) = ours_and_reference(case)
    assert relative_error(dx, dx_ref) <= 1e-5
    assert relative_error(dparams["kernel"], dparams_ref["kernel"]) <= 1e-5


@pytest.mark.parametrize(
    "chunk_rows, kernel, strides, padding",
    [
        (120, (3, 3), (1, 1), ((1, 1), (1, 1))),  # 12 padded rows x 10 outputs: 1 image a chunk
        (240, (3, 3), (1, 1), ((1, 1), (1, 1))),  # 2 images a chunk, the fifth by itself
        (55, (3, 3), (1, 1), ((0, 1), (0, 1))),  # uneven padding, chunks across images
        (1000, (2, 3), (1, 1), ((1, 0), (2, 1))),  # uneven kernel and padding; 1 chunk
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
def test_chunked_filter_gradient_matches_xla(
    chunk_rows, kernel, strides, padding, dtype, monkeypatch
):
    """The few-channel filter gradient (`rows^T @ shifted`) over chunks of 5 images of 10x10;
    bfloat16 operands against float32's gradient, accumulated in float32."""
    monkeypatch.setattr(conv_cpu, "_CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(conv_cpu, "_CHUNKED_MIN_PATCH_ELEMENTS", 0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 10, 10, 4), np.float32)
    w = rng.standard_normal((*kernel, 4, 8), np.float32)
    reference_conv = partial(
        lax.conv_general_dilated, dimension_numbers=("NHWC", "HWIO", "NHWC"), precision="highest"
    )
    y = reference_conv(x, w, strides, padding)
    dy = rng.standard_normal(y.shape, np.float32)

    @jax.jit
    def both(w):
        conv = lambda w_: conv_cpu.conv2d(x.astype(dtype), w_, strides, padding)  # noqa: E731
        ours = jax.vjp(conv, w.astype(dtype))[1](dy.astype(dtype))[0]
        return ours, jax.vjp(lambda w_: reference_conv(x, w_, strides, padding), w)[1](dy)[0]

    assert conv_cpu._method(x.shape, w.shape, strides, padding, 1) == "xla"
    assert conv_cpu._chunked_pays(x.shape, w.shape, dy.shape, strides)
    assert not conv_cpu._chunked_pays(x.shape, w.shape, dy.shape, (2, 2))  # strided: rows, XLA's
    assert relative_error(*both(w)) <= (1e-5 if dtype == np.float32 else 2e-2)


@pytest.mark.parametrize(
    "case", ["1x1", "3x3_stride2_same", "3x3_on_2x2", "7x7_on_4x4", "depthwise"]
)
def test_bfloat16_follows_float32(case):
    (y, dx, dparams), (y_ref, dx_ref, dparams_ref) = ours_and_reference(case, jnp.bfloat16)
    assert y.dtype == jnp.bfloat16 and dparams["kernel"].dtype == jnp.float32
    assert relative_error(y, y_ref) <= 2e-2
    assert relative_error(dx, dx_ref) <= 2e-2
    assert relative_error(dparams["kernel"], dparams_ref["kernel"]) <= 2e-2


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(features=8, kernel_size=(3, 3)),
        dict(features=8, kernel_size=(7, 7), strides=2, padding=[(3, 3), (3, 3)], use_bias=False),
        dict(features=8, kernel_size=(3, 3), feature_group_count=4, padding="VALID"),
        dict(features=8, kernel_size=(1, 1), kernel_init=nn.initializers.he_normal()),
    ],
)
def test_parameters_and_outputs_are_flax_linen_conv(kwargs):
    x = jax.random.normal(jax.random.key(0), (2, 6, 6, 4))
    ours = Conv(**kwargs).init(jax.random.key(1), x)
    flax_vars = nn.Conv(**kwargs).init(jax.random.key(1), x)
    assert jax.tree.map(jnp.shape, ours) == jax.tree.map(jnp.shape, flax_vars)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), ours, flax_vars))
    y = Conv(**kwargs).apply(flax_vars, x)
    assert relative_error(y, nn.Conv(**kwargs).apply(flax_vars, x)) <= 1e-6
    assert jnp.array_equal(
        Conv(**kwargs, impl="xla").apply(flax_vars, x), nn.Conv(**kwargs).apply(flax_vars, x)
    )


def test_auto_names_and_dilation_fallback():
    class Two(nn.Module):
        @nn.compact
        def __call__(self, x):
            return Conv(4, (3, 3))(Conv(4, (3, 3))(x))

    x = jax.random.normal(jax.random.key(0), (1, 8, 8, 2))
    assert sorted(Two().init(jax.random.key(0), x)["params"]) == ["Conv_0", "Conv_1"]
    dilated = nn.Conv(4, (3, 3), kernel_dilation=2)
    variables = dilated.init(jax.random.key(1), x)
    y = Conv(4, (3, 3), kernel_dilation=2).apply(variables, x)
    assert jnp.array_equal(y, dilated.apply(variables, x))


@pytest.mark.cpu_only("'auto' takes the CPU path on the CPU only, XLA's convolution elsewhere")
def test_impl_is_checked_and_auto_takes_the_cpu_path_on_cpu():
    x = jnp.ones((1, 4, 4, 2))
    with pytest.raises(ValueError, match="impl"):
        Conv(4, (3, 3), impl="fast").init(jax.random.key(0), x)
    variables = Conv(4, (3, 3)).init(jax.random.key(0), x)
    jaxpr = str(jax.make_jaxpr(lambda v: Conv(4, (3, 3)).apply(v, x))(variables))
    assert "custom_vjp_call" in jaxpr
    jaxpr = str(jax.make_jaxpr(lambda v: Conv(4, (3, 3), impl="xla").apply(v, x))(variables))
    assert "custom_vjp_call" not in jaxpr


@pytest.mark.parametrize(
    "shape, kernel, padding",
    [
        ((2, 35, 35, 3), (16, 16), "VALID"),  # a ViT's embedding, a remainder left out
        ((2, 16, 24, 3), (4, 2), "SAME"),  # SAME that pads nothing; patches not square
        ((2, 8, 8, 4), (2, 2), 0),  # PyTorch's padding=0
    ],
)
def test_non_overlapping_patches_are_one_matrix_product(shape, kernel, padding):
    """Non-overlapping patches take `patch_conv` on the CPU path: one `dot_general`, no
    convolution, equal to XLA's convolution to rounding, gradients too."""
    x = jax.random.normal(jax.random.key(0), shape)
    ours, xla = (Conv(8, kernel, kernel, padding=padding, impl=i) for i in ("cpu_fast", "xla"))
    variables = xla.init(jax.random.key(1), x)
    jaxpr = str(jax.make_jaxpr(ours.apply)(variables, x))
    assert "dot_general" in jaxpr and "conv_general_dilated" not in jaxpr

    def loss(module):
        return jax.grad(lambda v, x: (module.apply(v, x) ** 2).sum(), argnums=(0, 1))

    for a, b in zip(
        jax.tree.leaves((ours.apply(variables, x), loss(ours)(variables, x))),
        jax.tree.leaves((xla.apply(variables, x), loss(xla)(variables, x))),
        strict=True,
    ):
        assert a.shape == b.shape and relative_error(a, b) <= 1e-6
    if padding == "VALID":  # a map under one patch: no empty map, as XLA's would give
        with pytest.raises(ValueError, match=f"a 1x{shape[2]} map holds no whole {kernel[0]}x"):
            ours.init(jax.random.key(1), x[:, :1])


def test_conv2d_refuses_negative_padding():
    with pytest.raises(ValueError, match="non-negative"):
        conv_cpu.conv2d(jnp.ones((1, 4, 4, 1)), jnp.ones((3, 3, 1, 1)), (1, 1), ((-1, 0), (0, 0)))


def test_resnet_train_step_gradients_are_as_exact_as_flax_linen_conv():
    """A narrow ResNet-18, one block per stage: its float32 gradients are as close to the float64
    gradients (flax.linen.Conv's) as plain flax.linen.Conv's float32 ones, per tree and per kernel.

    Both are ~1e-4 from float64 (BatchNorm over 4 examples on 1x1 maps amplifies rounding), and
    ~1e-5 from each other, a figure that varies with the host's CPU (1.2e-5 on an Intel Xeon):
    so the measure is the error against float64, not against each other.
    """
    images = jax.random.normal(jax.random.key(0), (4, 32, 32, 3))  # last stage on 1x1 maps
    labels = jnp.arange(4) % 10
    kwargs = {"num_filters": 8, "stage_sizes": (1, 1, 1, 1)}
    networks = {
        label: nets_factory.get_network_fn("resnet18", 10, is_training=True, conv=conv, **kwargs)
        for label, conv in (("ours", Conv), ("flax", nn.Conv))
    }
    abstract = jax.eval_shape(networks["flax"].init, jax.random.key(1), images)  # the same tree
    variables = numpy_variables(abstract, seed=1)

    def grad(fn, variables, images):
        def loss(params):
            (logits, _), _ = fn.apply(
                {**variables, "params": params}, images, mutable=["batch_stats"]
            )
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        return jax.tree.map(np.asarray, jax.jit(jax.grad(loss))(variables["params"]))

    grads = {label: grad(fn, variables, images) for label, fn in networks.items()}
    with jax.enable_x64():
        exact_fn = nets_factory.get_network_fn(
            "resnet18", 10, is_training=True, conv=nn.Conv, dtype=jnp.float64, **kwargs
        )
        to64 = partial(np.asarray, dtype=np.float64)
        exact = grad(exact_fn, jax.tree.map(to64, variables), to64(images))
    assert {leaf.dtype for leaf in jax.tree.leaves(exact)} == {np.dtype(np.float64)}

    def errors(grads):
        pairs = jax.tree_util.tree_leaves_with_path(
            jax.tree.map(lambda g, e: relative_error(to64(g), e), grads, exact)
        )
        flat = np.concatenate([to64(g).ravel() for g in jax.tree.leaves(grads)])
        whole = relative_error(flat, np.concatenate([e.ravel() for e in jax.tree.leaves(exact)]))
        kernels = {jax.tree_util.keystr(p): e for p, e in pairs if "kernel" in str(p)}
        return {"all": whole, **kernels}

    ours, flax_own = errors(grads["ours"]), errors(grads["flax"])
    assert len(ours) == 14 and max(flax_own.values()) <= 3e-4  # 12 convolutions, the Dense head
    worse = {k: (ours[k], flax_own[k]) for k in ours if ours[k] > 1.25 * flax_own[k]}
    assert not worse, worse


def test_auto_on_a_gpu_leaves_patches_to_xlas_convolution(monkeypatch):
    """On a GPU `'auto'` is XLA's convolution (cuDNN's), an image's patches included: the patches
    as one product made ViT-S/16's step 0.90x there. Traced only: no GPU is needed to see it."""
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    x = jnp.ones((1, 32, 32, 3))
    conv = Conv(8, (16, 16), 16, padding="VALID")
    variables = conv.init(jax.random.key(0), x)
    jaxpr = str(jax.make_jaxpr(conv.apply)(variables, x))
    assert "conv_general_dilated" in jaxpr and "dot_general" not in jaxpr
